"""Thread-group facts the kernel's parts share: threads per warpgroup and the named-barrier ids, each id in
one place so that no two parts of codegen/kernels/ wait on the same barrier for different things."""

THREADS_PER_WARPGROUP = 128
# Named barriers (0 is __syncthreads): the epilogue of each consumer warpgroup set, then the ping-pong
# hand-offs: "warpgroup w may start its mainloop / its epilogue", then grouped K's trim of a k-tile.
EPILOGUE_BARRIER = 1  # + warpgroup index under ping-pong
MMA_TURN_BARRIER = 3  # + warpgroup index
EPI_TURN_BARRIER = 5  # + warpgroup index
TRIM_BARRIER = 7  # grouped K: a group's first/last k-tile is trimmed before the WGMMAs read it

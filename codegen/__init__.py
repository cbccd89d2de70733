"""Build-time code generation for hgemm-sm90: instance spec, matrix expansion, validity rules, kernels.

Nothing here ships in the wheel; `runtime/` must never import this package.
"""

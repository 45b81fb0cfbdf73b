"""Build-time code of the repository: generators and their inputs, run from a checkout, never shipped in the wheel.

A regular package (not a namespace one), so that ``import tools`` finds this directory and not the tests' folder of
the same name that pytest puts on ``sys.path``.
"""

"""The benchmarks (each file answers one question; see its docstring) and their shared harness."""

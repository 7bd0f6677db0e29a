"""Arrow UDFs run on executors (``mapInArrow``): vectorized, native matching, no Python per row."""

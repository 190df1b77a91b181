"""``ampsweep profile``: one FP32 run with hooks that rates each Cell's float16 headroom."""

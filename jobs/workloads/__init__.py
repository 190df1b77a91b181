"""Built-in workloads: small models that fail under float16 through real numerics."""

"""The store: the sweep folder, its driver lock, ``pull`` and ``status``."""

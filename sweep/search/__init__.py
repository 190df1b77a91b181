"""``search: adaptive``: choosing the next round of trials from the evidence."""

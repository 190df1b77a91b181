"""``ampsweep.Watch``: watching the user's own training and turning its first NaN into a sweep."""

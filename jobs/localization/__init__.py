"""Localization: which Cell broke a trial, found by replaying it with hooks on every Cell."""

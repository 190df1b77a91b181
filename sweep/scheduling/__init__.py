"""Scheduling: handing trials to device actors, holds, baselines, forks and progress."""

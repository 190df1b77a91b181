"""Rendering: Markdown, HTML, CSV, JSON, the terminal table and the figures.

Renderers format the computed model and its words; they read and write no file.
"""

"""Wording: the sentences, labels, code snippets and sections a report is made of.

Built from what ``compute`` found; every renderer formats these same words.
"""

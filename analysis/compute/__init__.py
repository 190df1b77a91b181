"""Computing the analysis: reading the sweep folder, scores, configurations, ranking, evidence.

Numbers and typed results only; the words are ``wording``'s and the formats ``render``'s.
"""

"""The search spaces shipped with autodeuq, installed as ``autodeuq.search_spaces``.

This folder is their source; ``autodeuq.search.space.load_space`` finds them by name.
"""

"""The search spaces shipped with autodeuq, installed as ``autodeuq.search_spaces``.

This folder is their source; ``autodeuq.space.load_space`` finds them by name.
"""

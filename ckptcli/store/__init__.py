"""Stores: the local directory store and the single-file form of one checkpoint."""

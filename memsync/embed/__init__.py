"""Embedding providers and the reranker, each in a module of its own; `embedders` chooses."""

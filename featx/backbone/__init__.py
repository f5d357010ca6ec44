"""The frozen encoder: a model name resolved to its files and fingerprint (`resolve`), loaded
with every weight checked (`load`), texts tokenised and cut into length-sorted batches
(`batching`), and the pooling functions from hidden states to vectors (`pooling`).

Imports: featx's top modules only. torch is imported inside the functions that need it.
"""

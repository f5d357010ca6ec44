"""The HDF5 cache of frozen features: what a pipeline's cache is (`plan`), its schema and key
(`schema`), writing it with a lock (`writer`), reading it (`reader`: `Cache`, torch-free), the
extraction's forward loop (`extract`), the vectors of the same texts copied when only the labels
changed (`reuse`) and its torchrun shards (`distributed`).

Imports: top, config, data, backbone, stats. Only `extract` and `distributed` import torch.
"""

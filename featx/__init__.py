"""featx: is a frozen backbone with a cheap head good enough, or must you fine-tune?

`import featx` stays light (no torch): the cache reader is what analysis code needs.

    cache = featx.open_cache("data/cache/trec-....h5")
    X, y = cache.features("train", pooling="mean", layer=-1), cache.labels("train")
"""
__version__ = "0.1.0"

from featx.errors import FeatxError  # noqa: E402


def open_cache(path):
    """Open a complete featx HDF5 cache for reading (see `featx.cache.Cache`)."""
    from featx.cache import Cache
    return Cache(path)


__all__ = ["FeatxError", "open_cache", "__version__"]

"""featx: is a frozen backbone with a cheap head good enough, or must you fine-tune?

`import featx` stays light (no torch): the cache reader is what analysis code needs.

    cache = featx.open_cache(pipeline="pipelines/trec.toml")
    X, y = cache.features("train", pooling="mean", layer=-1), cache.labels("train")
    predictor = featx.load_predictor("pipelines/trec.toml")   # the verdict's choice
    predictor.predict(["What is the capital of France ?"])
"""
from featx.errors import FeatxError
from featx.version import __version__


def open_cache(path=None, *, pipeline=None):
    """Open a complete featx HDF5 cache for reading (see `featx.cache.Cache`): by its path, or
    the cache a pipeline's extraction wrote (`pipeline="pipelines/trec.toml"`)."""
    from featx.cache import Cache

    if (path is None) == (pipeline is None):
        raise FeatxError("open_cache takes a cache path or pipeline=..., one of the two")
    if path is not None and not isinstance(path, (str, __import__("os").PathLike)):
        raise FeatxError(f"open_cache takes a cache path (a str or Path), got {type(path).__name__}")
    if pipeline is not None:
        from featx.config import Pipeline
        from featx.configfile import load_pipeline
        from featx.plan import find_cache

        config = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
        path = find_cache(config)
    return Cache(path)


def embed(texts, text_pairs=None, **options):
    """Vectors of texts from a frozen backbone, by featx's extractor (see `featx.embedding.embed`)."""
    from featx.embedding import embed as _embed
    return _embed(texts, text_pairs, **options)


def load_predictor(pipeline, head=None, **options):
    """A predictor (`.predict`, `.predict_proba`, `.classes_`) for a pipeline's chosen
    configuration, or an exported folder (see `featx.predict.load_predictor`)."""
    from featx.predict import load_predictor as _load
    return _load(pipeline, head, **options)


__all__ = ["FeatxError", "embed", "load_predictor", "open_cache", "__version__"]

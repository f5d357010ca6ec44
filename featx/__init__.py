"""featx: is a frozen backbone with a cheap head good enough, or must you fine-tune?

`import featx` stays light (no torch): the cache reader is what analysis code needs.

    cache = featx.open_cache(pipeline="pipelines/trec.toml")
    X, y = cache.features("train", pooling="mean", layer=-1), cache.labels("train")
    predictor = featx.load_predictor("pipelines/trec.toml")   # the verdict's choice
    predictor.predict(["What is the capital of France ?"])
    answer = featx.run(train=df_train, test=df_test, text="text", label="label")   # data in memory
"""
from featx.errors import FeatxError
from featx.version import __version__


def open_cache(path=None, *, pipeline=None):
    """Open a complete featx HDF5 cache for reading (see `featx.cache.reader.Cache`): by its path, or
    the cache a pipeline's extraction wrote (`pipeline="pipelines/trec.toml"`)."""
    from featx.cache.reader import Cache

    if (path is None) == (pipeline is None):
        raise FeatxError("open_cache takes a cache path or pipeline=..., one of the two")
    if path is not None and not isinstance(path, (str, __import__("os").PathLike)):
        raise FeatxError(f"open_cache takes a cache path (a str or Path), got {type(path).__name__}")
    if pipeline is not None:
        from featx.config.pipeline import Pipeline
        from featx.config.load import load_pipeline
        from featx.cache.plan import find_cache

        config = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
        path = find_cache(config)
    return Cache(path)


def open_curve(pipeline, overrides=()):
    """The learning curve's points (`featx curve`) of a pipeline (a path, or a Pipeline), one dict
    per side, budget and draw: `pandas.DataFrame(featx.open_curve("pipelines/trec.toml"))`. The
    budgets' intervals, the fits and the crossover are in the report's verdict.json
    (`label_curve`). Empty when the curve has not run."""
    from featx.config.load import load_pipeline
    from featx.config.pipeline import Pipeline
    from featx.report.curve import curve_points

    config = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline, list(overrides))
    return curve_points(config)


def __getattr__(name: str):
    """`featx.run`, `featx.embed` and `featx.load_predictor` are the functions themselves, with
    their own signatures and docs (featx.inmemory.run, featx.serve.embedding.embed,
    featx.serve.predict.load_predictor), imported when first used: `import featx` stays without torch."""
    if name in ("run", "embed", "load_predictor"):
        from featx.cpus import share_cores

        share_cores()  # before torch loads: how its threads wait on a busy machine (featx.cpus)
    if name == "embed":
        from featx.serve.embedding import embed
        return embed
    if name == "run":
        from featx.inmemory import run
        return run
    if name == "load_predictor":
        from featx.serve.predict import load_predictor
        return load_predictor
    raise AttributeError(f"module 'featx' has no attribute {name!r}")


__all__ = ["FeatxError", "embed", "load_predictor", "open_cache", "open_curve", "run", "__version__"]

"""Every input format read once into one row store, checked where it enters: CSV/TSV (pyarrow),
JSONL and label-text lines, Parquet files and folders, saved Hugging Face datasets and the
built-ins (`formats`); each value's rules and messages (`rules`), checked a column at a time
(`columns`); the reading of a dataset's files into the store (`rows`, `store`), a fast reader's
refusals explained by the csv module (`explain`); labels decoded into the task, names and
encodings (`labels`); rows assigned to splits (`splits`); and the `Dataset` a cache is built
from, or predict's `Inputs` (`dataset`).

Imports: featx's top modules and featx.stats (stratification). No torch.
"""
from featx.data.dataset import (Dataset, Inputs, Split, check_splits_apart, dataset_fingerprint, listed_files,
                                load_dataset, read_inputs)

__all__ = ["Dataset", "Inputs", "Split", "check_splits_apart", "dataset_fingerprint", "listed_files",
           "load_dataset", "read_inputs"]

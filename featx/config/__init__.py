"""A pipeline's configuration: frozen dataclasses for `[data]`, `[model]`, `[extract]`, `[probe]`
and `[finetune]` (`pipeline`, `stages`), the closed sets and limits they are checked by
(`rules`), and the TOML file with its `key=value` overrides read into them (`load`). A config is
valid when it is built: later stages trust it.

Imports: featx's top modules only (errors, tasks, files). No torch.
"""

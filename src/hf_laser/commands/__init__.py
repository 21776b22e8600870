"""The command line, above the library: one module per `hf-laser` subcommand (`embed`, `tokenize`, `mine`,
`embed_shards`, `similar`, `convert`, `push`), each with `add_arguments(parser)` and `run(args) -> int`.

Command modules import the library; library modules never import them. A command module imports nothing heavy at
module level (torch, transformers, faiss are imported by `run`), so that `hf-laser SUBCOMMAND --help` stays fast;
`hf_laser.cli` assembles them.
"""

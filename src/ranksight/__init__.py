"""ranksight: live diagnosis of RCCL/NCCL training jobs. The floors of the package are drawn in
``tests/unit/test_layering.py``: errors and client (the ground), schemas, core, api, agent | aggregator, deploy,
simulate, commands, cli, docgen."""

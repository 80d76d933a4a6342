"""Active GPU probes: a subprocess measures each GPU (matmul TFLOPS, memory bandwidth) so the agent never loads torch.

``protocol`` (JSON lines the worker writes on stdout), ``worker`` (the subprocess, the only importer of torch),
``runner`` (spawns it with a time and a memory bound), ``busy`` (is a job using this node?), ``schedule`` (when to probe).
"""

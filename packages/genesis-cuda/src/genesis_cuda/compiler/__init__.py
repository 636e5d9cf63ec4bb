"""genesis-cuda's compiler: the CUDA backend's side of ``genesis.compile``.

genesis-core traces a function into a graph of genesis ops (``genesis.compiler.graph``) and
hands it to ``CUDABackend.compile_graph``; this package turns the graph into a callable:

* ``partition``: the graph split into fusible groups (elementwise chains with their views,
  casts, ``cat`` and last-dim reductions) and everything else (matmul, attention, the fused
  kernels, indexing, random), which core's replay runs unchanged;
* ``codegen`` (with ``ops_table``): one readable Triton kernel per fused group;
* ``kernel_cache``: generated source written to a file, imported and launched;
* ``runner``: the compiled callable;
* ``cuda_graph``: the callable captured into a CUDA graph and replayed.
"""

"""Deployment forms of a model: group-wise quantized weights, ONNX graphs, Core ML packages.

One module per form (``quantized``, ``onnx_graph``, ``coreml``); each writes a model directory
(or package) with a ``supergrep_model.json`` naming its source model, the form and the
supergrep version, and checks its vectors against the float PyTorch model (``parity``).
"""

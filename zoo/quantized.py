"""Quantized zoo models, made the way users make them: onnxruntime's quantizer.

Each float zoo model (:func:`~zoo.mobilenet_v2`, :func:`~zoo.resnet18`, a small
:func:`~zoo.bert_encoder` of 32 tokens) goes through ``quant_pre_process`` (onnxruntime's
optimizer folds BatchNormalization into the convolutions, as its documentation
recommends before quantizing), then one of

- ``"qdq"``: ``quantize_static`` in ``QuantFormat.QDQ`` -- QuantizeLinear/DequantizeLinear
  pairs around float ops, uint8 activations, int8 weights per output channel;
- ``"qoperator"``: ``quantize_static`` in ``QuantFormat.QOperator`` -- QLinearConv,
  QLinearMatMul and the com.microsoft QLinearAdd, QLinearMul, QLinearGlobalAveragePool,
  QLinearConcat, QLinearSoftmax, QGemm;
- ``"dynamic"``: ``quantize_dynamic`` -- int8 weights, activations quantized at run time
  (DynamicQuantizeLinear, MatMulInteger, ConvInteger).

Static quantization calibrates (MinMax) on :data:`CALIBRATION_BATCHES` batches of
:func:`zoo.calibration_inputs` seeded ``seed, seed + 1, ...``. Models are cached in
``folder``, by default ``$SUBGRAPH_CORPUS_DIR/quantized`` (the corpus cache, which the
test suite keeps between runs), else ``subgraph-zoo-quantized`` in the temporary folder,
under a name that holds the model, format, seed, :data:`RECIPE` and onnxruntime version,
so a cached file is the one this onnxruntime would make. onnxruntime is imported only when
a model is built.

Examples
--------
>>> quantized_names()
['mobilenet_v2', 'resnet18', 'bert_encoder']
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:  # doctest: +SKIP
...     model = quantized_model("bert_encoder", "dynamic", folder=folder)
>>> sorted({n.op_type for n in model.graph.node} & {"MatMulInteger", "DynamicQuantizeLinear"})  # doctest: +SKIP
['DynamicQuantizeLinear', 'MatMulInteger']
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from subgraph.errors import RegistryError
from zoo.bert import bert_encoder
from zoo.feeds import calibration_inputs, save
from zoo.vision import mobilenet_v2, resnet18

__all__ = ["CALIBRATION_BATCHES", "FORMATS", "RECIPE", "quantized_model", "quantized_names", "quantized_path"]

#: the quantized formats, see the module notes
FORMATS = ("qdq", "qoperator", "dynamic")

#: calibration batches of a static quantization
CALIBRATION_BATCHES = 4

#: bump when the way models are quantized changes: older cached files are not reused
RECIPE = 2

_BUILDERS: dict[str, Callable[[int], Any]] = {
    "mobilenet_v2": lambda seed: mobilenet_v2(seed=seed),
    "resnet18": lambda seed: resnet18(seed=seed),
    "bert_encoder": lambda seed: bert_encoder(seq=32, seed=seed),
}


def quantized_names() -> list[str]:
    """The zoo models :func:`quantized_model` quantizes."""
    return list(_BUILDERS)


def _folder(folder: str | os.PathLike[str] | None) -> str:
    if folder is not None:
        return os.fspath(folder)
    if os.environ.get("SUBGRAPH_CORPUS_DIR"):
        return os.path.join(os.environ["SUBGRAPH_CORPUS_DIR"], "quantized")
    return os.path.join(tempfile.gettempdir(), "subgraph-zoo-quantized")


def quantized_path(name: str, fmt: str, seed: int = 0, folder: str | os.PathLike[str] | None = None) -> str:
    """The file of :func:`quantized_model` ``(name, fmt, seed)``, built on first use.

    Raises
    ------
    RegistryError
        ``name`` or ``fmt`` is unknown; the message lists the known ones.
    """
    if name not in _BUILDERS:
        raise RegistryError(f"no quantized zoo model {name!r}; there are {quantized_names()}")
    if fmt not in FORMATS:
        raise RegistryError(f"no quantized format {fmt!r}; there are {list(FORMATS)}")
    import onnxruntime

    folder = _folder(folder)
    path = os.path.join(folder, f"{name}-{fmt}-seed{seed}-recipe{RECIPE}-ort{onnxruntime.__version__}.onnx")
    if not os.path.exists(path):
        save(_quantize(name, fmt, seed), folder, os.path.basename(path)[:-len(".onnx")])
    return path


def quantized_model(name: str, fmt: str, seed: int = 0, folder: str | os.PathLike[str] | None = None) -> Any:
    """``name`` (one of :func:`quantized_names`) quantized in ``fmt`` (one of :data:`FORMATS`),
    as an ``onnx.ModelProto``; see the module notes."""
    import onnx

    return onnx.load(quantized_path(name, fmt, seed, folder))


class _Calibration:
    """onnxruntime's ``CalibrationDataReader`` protocol: seeded batches, then ``None``."""

    def __init__(self, model: Any, seed: int) -> None:
        self._batches = iter([calibration_inputs(model, seed + i) for i in range(CALIBRATION_BATCHES)])

    def get_next(self) -> dict | None:
        return next(self._batches, None)

    def __iter__(self) -> Any:  # some onnxruntime versions iterate the reader
        return iter(self.get_next, None)


def _quantize(name: str, fmt: str, seed: int) -> Any:
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = _BUILDERS[name](seed)
    with tempfile.TemporaryDirectory() as work:
        raw, prepared, out = (os.path.join(work, f) for f in ("float.onnx", "prepared.onnx", "quantized.onnx"))
        onnx.save(model, raw)
        quant_pre_process(raw, prepared)
        if fmt == "dynamic":
            quantize_dynamic(prepared, out, weight_type=QuantType.QInt8)
        else:
            quantize_static(prepared, out, _Calibration(model, seed),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
        quantized = onnx.load(out)
    quantized.graph.name = f"{name}_{fmt}"
    return quantized

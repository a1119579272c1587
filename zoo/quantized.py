"""Quantized zoo models, made the way users make them: onnxruntime's quantizer.

Two sets, like the corpus (:func:`quantized_names` and :func:`quantized_entries` take
``size``):

- ``"small"`` (the default): the zoo's float models :func:`~zoo.mobilenet_v2`,
  :func:`~zoo.resnet18` and a small :func:`~zoo.bert_encoder` of 32 tokens, each in every
  format of :data:`FORMATS`;
- ``"deploy"``: the corpus's deployment-size models (:mod:`zoo.corpus.deploy`, legacy
  exporter) in the formats :data:`DEPLOY` gives them: ResNet-50 and MobileNetV3-Large at
  224 px and the CRNN text recognizer in ``qdq`` and ``qoperator``, BERT-base at 128
  tokens ``dynamic`` and ``qdq`` (its MatMul and Gemm nodes only: its attention adds the
  mask as float32's lowest value, and quantizing that Add calibrates an infinite scale).

Each float model goes through ``quant_pre_process`` (onnxruntime's optimizer folds
BatchNormalization into the convolutions, as its documentation recommends before
quantizing), then one of

- ``"qdq"``: ``quantize_static`` in ``QuantFormat.QDQ`` -- QuantizeLinear/DequantizeLinear
  pairs around float ops, uint8 activations, int8 weights per output channel;
- ``"qoperator"``: ``quantize_static`` in ``QuantFormat.QOperator`` -- QLinearConv,
  QLinearMatMul and the com.microsoft QLinearAdd, QLinearMul, QLinearGlobalAveragePool,
  QLinearConcat, QLinearSoftmax, QGemm;
- ``"dynamic"``: ``quantize_dynamic`` -- int8 weights, activations quantized at run time
  (DynamicQuantizeLinear, MatMulInteger, ConvInteger).

Weights are quantized to 7 bits (``reduce_range=True``), onnxruntime's advice for x86 CPUs
without VNNI: there its uint8 x int8 kernels add each pair of products in int16, which
saturates with full-range weights, and onnxruntime, the reference of every int8 test, would
be off by tens of steps (``tests/int8_oracle.py``). In 7 bits it is exact on every CPU.

Static quantization calibrates (MinMax) on :data:`CALIBRATION_BATCHES` batches seeded
``seed, seed + 1, ...``: :func:`zoo.calibration_inputs` for a small model, and for a
deployment-size one :func:`corpus_inputs`, drawn by the rule the corpus draws that model's
example inputs with. A deployment-size model's weights are the corpus's (the seed only
chooses the calibration batches). Models are cached in ``folder``, by default
``$SUBGRAPH_CORPUS_DIR/quantized`` (the corpus cache, which the test suite keeps between
runs), else ``subgraph-zoo-quantized`` in the temporary folder, under a name that holds the
model, format, seed, :data:`RECIPE` and onnxruntime version (and for a deployment-size
model the corpus export it starts from: torch version and corpus recipe), so a cached file
is the one this onnxruntime would make. onnxruntime, onnx and torch are imported only when
a model is built.

Outputs are compared with onnxruntime's within int8 rounding by :func:`int8_mismatch`, in
steps of the output's quantization grid (:func:`output_step`); the bound is explained in
tests/models/test_quantized_models.py.

Examples
--------
>>> quantized_names()
['mobilenet_v2', 'resnet18', 'bert_encoder']
>>> quantized_entries(size="deploy")[:3]
['deploy_resnet50:qdq', 'deploy_resnet50:qoperator', 'deploy_mobilenet_v3_large:qdq']
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
from importlib import metadata
from typing import Any

import numpy as np

from subgraph.errors import RegistryError
from zoo.bert import bert_encoder
from zoo.builder import rng_for
from zoo.feeds import calibration_inputs, example_inputs, save
from zoo.vision import mobilenet_v2, resnet18

__all__ = ["CALIBRATION_BATCHES", "DEPLOY", "FORMATS", "MAX_STEPS", "MEAN_STEPS", "RECIPE", "SIZES", "corpus_inputs",
           "example_feeds", "int8_mismatch", "output_step", "quantized_entries", "quantized_model",
           "quantized_names", "quantized_path", "reference_outputs", "source_model"]

#: the quantized formats, see the module notes
FORMATS = ("qdq", "qoperator", "dynamic")

#: the sets of :func:`quantized_names`: the zoo's small models (the default) and the corpus's deployment sizes
SIZES = ("small", "deploy")

#: the deployment-size corpus models quantized, and their formats
DEPLOY: dict[str, tuple[str, ...]] = {
    "deploy_resnet50": ("qdq", "qoperator"),
    "deploy_mobilenet_v3_large": ("qdq", "qoperator"),
    "deploy_crnn": ("qdq", "qoperator"),
    "deploy_bert_base": ("dynamic", "qdq"),
}

#: calibration batches of a static quantization
CALIBRATION_BATCHES = 4

#: bump when the way models are quantized changes: older cached files are not reused
RECIPE = 3

#: end-to-end bounds of :func:`int8_mismatch`, in steps of the output's grid, where onnxruntime's
#: own disagreement is smaller: one near-tie step carried through a layer or two
MAX_STEPS = 2
MEAN_STEPS = 0.5

#: a static quantization's ``op_types_to_quantize`` where it is not every op onnxruntime can: BERT-base's
#: attention adds its mask as float32's lowest value, and calibrating that Add gives an infinite scale
_STATIC_OPS = {"deploy_bert_base": ["MatMul", "Gemm"]}

_BUILDERS: dict[str, Callable[[int], Any]] = {
    "mobilenet_v2": lambda seed: mobilenet_v2(seed=seed),
    "resnet18": lambda seed: resnet18(seed=seed),
    "bert_encoder": lambda seed: bert_encoder(seq=32, seed=seed),
}

#: the corpus's token rule (zoo.corpus.deploy): ids below 1000, the attention mask's first 100 tokens kept
_TOKEN_HIGH, _UNPADDED = 1000, 100


def quantized_names(size: str = "small") -> list[str]:
    """The models :func:`quantized_model` quantizes: the zoo's small ones (``size="small"``,
    each in every format) or the corpus's deployment-size ones (``size="deploy"``).

    Raises
    ------
    RegistryError
        ``size`` is not one of :data:`SIZES`.
    """
    if size not in SIZES:
        raise RegistryError(f"no quantized set {size!r}; there are {list(SIZES)}")
    return list(_BUILDERS) if size == "small" else list(DEPLOY)


def quantized_entries(size: str = "small") -> list[str]:
    """Every ``"name:format"`` of one set, in :func:`quantized_names` order, then format order.

    Examples
    --------
    >>> quantized_entries()[:2]
    ['mobilenet_v2:qdq', 'mobilenet_v2:qoperator']
    >>> quantized_entries(size="deploy")[-2:]
    ['deploy_bert_base:dynamic', 'deploy_bert_base:qdq']
    """
    return [f"{name}:{fmt}" for name in quantized_names(size) for fmt in _formats(name)]


def _formats(name: str) -> tuple[str, ...]:
    if name in _BUILDERS:
        return FORMATS
    if name in DEPLOY:
        return DEPLOY[name]
    raise RegistryError(f"no quantized zoo model {name!r}; there are {quantized_names()} and {quantized_names('deploy')}")


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
    formats = _formats(name)
    if fmt not in formats:
        raise RegistryError(f"no quantized format {fmt!r} of {name!r}; there are {list(formats)}")
    import onnxruntime

    stem = f"{name}-{fmt}-seed{seed}-recipe{RECIPE}-ort{onnxruntime.__version__}"
    if name in DEPLOY:  # the export it starts from: the corpus's folder name (torch version, corpus recipe)
        from zoo.corpus.export import cached_paths

        stem += f"-from-{cached_paths(name, 'legacy', metadata.version('torch'))[0].parent.name}"
    folder = _folder(folder)
    path = os.path.join(folder, f"{stem}.onnx")
    if not os.path.exists(path):
        save(_quantize(name, fmt, seed), folder, stem)
    return path


def quantized_model(name: str, fmt: str, seed: int = 0, folder: str | os.PathLike[str] | None = None) -> Any:
    """``name`` (one of :func:`quantized_names` of either set) quantized in ``fmt`` (one of
    :data:`FORMATS` it is made in), as an ``onnx.ModelProto``; see the module notes."""
    import onnx

    return onnx.load(quantized_path(name, fmt, seed, folder))


def source_model(name: str, seed: int = 0) -> Any:
    """The float ``onnx.ModelProto`` that :func:`quantized_model` quantizes: the zoo model built
    with ``seed``, or the corpus's legacy export of a deployment-size one (``seed`` unused)."""
    _formats(name)
    if name in DEPLOY:
        import zoo.corpus

        return zoo.corpus.load(name, "legacy").model
    return _BUILDERS[name](seed)


def example_feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of ``name``, float and quantized alike: a small model's :func:`zoo.example_inputs`
    (``seed``), a deployment-size one's corpus example inputs (the ``.npz`` beside its export)."""
    _formats(name)
    if name in DEPLOY:
        import zoo.corpus

        return zoo.corpus.load(name, "legacy").feeds
    return example_inputs(_BUILDERS[name](seed), seed)


def corpus_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A batch of a deployment-size model's inputs, shaped as :data:`zoo.corpus.deploy.SIZES` says
    and drawn by the corpus's rule: token ids below 1000, an attention mask with its last 28 of
    128 tokens padded, Whisper's features and the ``If`` model's input normal, images uniform
    in [0, 1); each input from a generator seeded by ``seed``, the model and the input name.

    Examples
    --------
    >>> batch = corpus_inputs("deploy_bert_base", seed=1)
    >>> {k: (v.dtype.name, v.shape) for k, v in batch.items()}
    {'input_ids': ('int64', (1, 128)), 'attention_mask': ('int64', (1, 128))}
    >>> int(batch["attention_mask"].sum()), int(batch["input_ids"].max()) < 1000
    (100, True)
    """
    from zoo.corpus.deploy import SIZES as SHAPES

    batch = {}
    for input_name, (shape, dtype) in SHAPES[name].items():
        rng = rng_for(seed, f"calibration/{name}/{input_name}")
        if input_name == "input_ids":
            batch[input_name] = rng.integers(0, _TOKEN_HIGH, shape).astype(dtype)
        elif input_name == "attention_mask":
            batch[input_name] = (np.arange(shape[-1]) < _UNPADDED).astype(dtype) * np.ones(shape, dtype)
        elif input_name == "input_features" or name == "deploy_control_if":
            batch[input_name] = rng.standard_normal(shape).astype(dtype)
        else:
            batch[input_name] = rng.random(shape).astype(dtype)
    return batch


class _Calibration:
    """onnxruntime's ``CalibrationDataReader`` protocol: the batches, then ``None``."""

    def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
        self._batches = iter(batches)

    def get_next(self) -> dict | None:
        return next(self._batches, None)

    def __iter__(self) -> Any:  # some onnxruntime versions iterate the reader
        return iter(self.get_next, None)


def _quantize(name: str, fmt: str, seed: int) -> Any:
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = source_model(name, seed)
    with tempfile.TemporaryDirectory() as work:
        raw, prepared, out = (os.path.join(work, f) for f in ("float.onnx", "prepared.onnx", "quantized.onnx"))
        onnx.save(model, raw)
        quant_pre_process(raw, prepared)
        if fmt == "dynamic":
            quantize_dynamic(prepared, out, weight_type=QuantType.QInt8, reduce_range=True)
        else:
            draw = (lambda s: corpus_inputs(name, s)) if name in DEPLOY else (lambda s: calibration_inputs(model, s))
            quantize_static(prepared, out, _Calibration([draw(seed + i) for i in range(CALIBRATION_BATCHES)]),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                            reduce_range=True, op_types_to_quantize=_STATIC_OPS.get(name))
        quantized = onnx.load(out)
    quantized.graph.name = f"{name}_{fmt}"
    return quantized


# -- comparing with onnxruntime within int8 rounding ---------------------------------------------------

def reference_outputs(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs of the graph as written (``ORT_DISABLE_ALL``: no fused integer kernels),
    the reference :func:`int8_mismatch` measures against."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def output_step(model: Any, reference: np.ndarray) -> float:
    """One step of the first output's quantization grid: the scale of the DequantizeLinear that
    makes it, else 1/255 of ``reference``'s range (one step of an int8 grid spanning it)."""
    from onnx import numpy_helper

    output = model.graph.output[0].name
    producer = next(n for n in model.graph.node if output in n.output)
    if producer.op_type == "DequantizeLinear":
        scale = next(t for t in model.graph.initializer if t.name == producer.input[1])
        return float(numpy_helper.to_array(scale).reshape(()))
    return float(np.ptp(reference)) / 255


def int8_mismatch(actual: np.ndarray, reference: np.ndarray, fused: np.ndarray, step: float) -> str | None:
    """``None`` where ``actual`` lies within int8 rounding of ``reference`` (see
    :func:`reference_outputs`), else what differs. In steps of ``step`` (:func:`output_step`),
    ``actual`` may be as far from ``reference`` as onnxruntime's default session's ``fused`` is,
    and in any case :data:`MAX_STEPS` anywhere and :data:`MEAN_STEPS` on average.

    Examples
    --------
    >>> ref = np.array([0.0, 0.5, 1.0], np.float32)
    >>> int8_mismatch(np.array([0.0, 0.5, 1.5], np.float32), ref, ref, 0.5) is None  # one step at one place
    True
    >>> print(int8_mismatch(np.array([0.0, 0.5, 2.5], np.float32), ref, ref, 0.5))
    differs by up to 3.00 steps, 1.000 on average; onnxruntime's fused session by 0.00 and 0.000
    """
    if actual.dtype != reference.dtype or actual.shape != reference.shape:
        return f"gives {actual.dtype} {actual.shape}, onnxruntime {reference.dtype} {reference.shape}"
    steps = np.abs(actual.astype(np.float64) - reference) / step
    own = np.abs(fused.astype(np.float64) - reference) / step  # onnxruntime's own disagreement
    # + 1e-3: grid values are float32, so a step measures 1 +- 1e-6
    most, mean = max(MAX_STEPS, own.max()) + 1e-3, max(MEAN_STEPS, own.mean()) + 1e-3
    if steps.max() <= most and steps.mean() <= mean:
        return None
    return (f"differs by up to {steps.max():.2f} steps, {steps.mean():.3f} on average; "
            f"onnxruntime's fused session by {own.max():.2f} and {own.mean():.3f}")

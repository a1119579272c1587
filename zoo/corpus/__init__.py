"""A corpus of real architectures as torch exports them, generated on demand and cached.

Each entry builds a torch module with seeded random weights (``torch.manual_seed(0)``) and
an example input, small enough that export, load and run take seconds; :func:`load`
exports it with the ``legacy`` (TorchScript) or ``dynamo`` exporter (see
:mod:`zoo.corpus.export`) into the cache folder, once per torch version, and returns the
model with its feeds. Nothing is committed: the files are made where they are needed.

Families: torchvision classifiers (``tv_*``), segmentation (``seg_*``, bilinear Resize),
detection (``det_*``: NonMaxSuppression, TopK, data-dependent shapes), timm (``timm_*``),
Hugging Face transformers from small configs (``hf_*``), recurrent nets, a UNet, an
``nn.TransformerEncoder``, control flow (``control_*``: If and Loop, legacy exporter
only), and ``*_dynamic`` entries exported with symbolic batch and sequence dimensions
(``from_onnx`` needs ``input_shapes`` for them: :attr:`Sample.input_shapes`).

Beside this small set, the deployment set (``deploy_*``, :mod:`zoo.corpus.deploy`): the
same kinds of architecture at the sizes people deploy (224 px classifiers, a 640 px
detector, full-size transformers at 128 tokens ...), listed by ``names(size="deploy")``.
:func:`names` lists the small set only; :func:`entry` and :func:`load` take both.

Needs torch, torchvision, timm, transformers and onnxscript (the ``corpus`` extra of
setup.cfg); they are imported only when a model is exported.

Examples
--------
>>> len(names()) >= 40
True
>>> entry("control_loop").exporters
('legacy',)
>>> names(size="deploy")[:2]
['deploy_resnet50', 'deploy_mobilenet_v3_large']
>>> entry("deploy_crnn").family
'recurrent'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zoo.corpus import deploy, small, text, vision
from zoo.corpus._torchvision import import_torchvision
from zoo.corpus.export import EXPORTERS, cache_dir, cached_paths, export, save_feeds

__all__ = ["EXPORTERS", "SIZES", "Entry", "Sample", "cache_dir", "entry", "load", "module_and_args", "names"]


@dataclass(frozen=True)
class Entry:
    """One corpus model: how to build it and how it is exported."""

    name: str
    family: str
    build: Callable[[], tuple[Any, tuple]]
    input_names: tuple[str, ...] = ("x",)
    exporters: tuple[str, ...] = EXPORTERS
    dynamic_axes: dict[str, dict[int, str]] | None = None


@dataclass
class Sample:
    """An exported model, its feeds, and the static shapes a dynamic model needs."""

    name: str
    exporter: str
    model: Any  # onnx.ModelProto
    feeds: dict[str, Any]
    input_shapes: dict[str, list[int]] | None


def _entries() -> list[Entry]:
    out = [Entry(f"tv_{n}", "torchvision", lambda n=n: vision.classifier(n)) for n in vision.TORCHVISION]
    out.append(Entry("tv_vit_small", "torchvision", vision.vit_small))
    out += [Entry(f"seg_{n}", "segmentation", lambda n=n: vision.segmenter(n)) for n in vision.SEGMENTATION]
    out += [Entry(f"det_{n}", "detection", lambda n=n: vision.detector(n)) for n in vision.DETECTION]
    out += [Entry(f"timm_{n}", "timm", lambda n=n: vision.timm_model(n)) for n in vision.TIMM]
    inputs = {"hf_bert": ("input_ids", "attention_mask"), "hf_distilbert": ("input_ids", "attention_mask"),
              "hf_gpt2_past": ("input_ids", "past_key_0", "past_value_0", "past_key_1", "past_value_1"),
              "hf_t5": ("input_ids", "decoder_input_ids"), "hf_vit": ("pixel_values",),
              "hf_whisper_encoder": ("input_features",), "hf_wav2vec2": ("input_values",),
              "hf_llama": ("input_ids",), "hf_roberta": ("input_ids",)}
    out += [Entry(n, "transformers", lambda n=n: text.transformer(n), inputs[n]) for n in text.TRANSFORMERS]
    for n in small.SMALL:
        family = ("control flow" if n.startswith("control") else
                  "recurrent" if n.startswith(("lstm", "gru", "rnn")) else "small")
        exporters = ("legacy",) if n.startswith("control") else EXPORTERS
        out.append(Entry(n, family, lambda n=n: small.small(n), exporters=exporters))
    seq = {0: "batch", 1: "sequence"}
    out += [
        Entry("hf_bert_dynamic", "dynamic", _batch_of_two(lambda: text.transformer("hf_bert")), inputs["hf_bert"],
              dynamic_axes={"input_ids": seq, "attention_mask": seq}),
        Entry("lstm_dynamic", "dynamic", _batch_of_two(lambda: small.small("lstm_stacked_bidirectional")),
              dynamic_axes={"x": seq}),
        # the legacy tracer bakes nn.MultiheadAttention's sequence length into its reshapes
        Entry("transformer_encoder_dynamic", "dynamic", _batch_of_two(lambda: small.small("transformer_encoder")),
              exporters=("dynamo",), dynamic_axes={"x": seq}),
    ]
    return out


def _batch_of_two(build: Callable[[], tuple[Any, tuple]]) -> Callable[[], tuple[Any, tuple]]:
    """``build`` with a batch of two different rows: exporters specialize a dimension whose
    example size is 1 (torch.export's 0/1 specialization, the tracer's Python ints), so a
    model exported from a batch of one runs only at batch one."""
    def built() -> tuple[Any, tuple]:
        import torch

        module, args = build()
        return module, tuple(a if a.shape[0] != 1 else torch.cat([a, a.roll(1, dims=-1)]) for a in args)

    return built


def _deploy_entries() -> list[Entry]:
    # the exporters of each family in the small set: control flow needs the legacy one
    return [Entry(n, deploy.FAMILIES[n], lambda n=n: deploy.build(n), tuple(deploy.SIZES[n]),
                  ("legacy",) if deploy.FAMILIES[n] == "control flow" else EXPORTERS)
            for n in deploy.SIZES]


#: the sets :func:`names` lists: ``small`` (the default, what the test suite runs) and ``deploy``
SIZES = ("small", "deploy")
_SETS = {"small": {e.name: e for e in _entries()}, "deploy": {e.name: e for e in _deploy_entries()}}
_ENTRIES = {**_SETS["small"], **_SETS["deploy"]}


def names(size: str = "small") -> list[str]:
    """The models of one set, in registry order: ``small`` (toy sizes, the default) or
    ``deploy`` (deployment sizes); ValueError names the sets."""
    if size not in _SETS:
        raise ValueError(f"unknown corpus size {size!r}; expected one of {', '.join(SIZES)}")
    return list(_SETS[size])


def entry(name: str) -> Entry:
    """The registry entry of ``name``; KeyError names the known models."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise KeyError(f"unknown corpus model {name!r}; known: {', '.join(_ENTRIES)}") from None


def module_and_args(name: str) -> tuple[Any, tuple]:
    """Build ``name``'s torch module (eval mode, seeded weights) and example input."""
    import_torchvision()  # before timm or transformers import it
    return entry(name).build()


def load(name: str, exporter: str) -> Sample:
    """``name`` exported by ``exporter``, from the cache or exported now (and cached)."""
    import numpy as np
    import onnx
    import torch

    e = entry(name)
    if exporter not in e.exporters:
        raise ValueError(f"{name} is exported by {', '.join(e.exporters)} only, not {exporter!r}")
    model_path, feeds_path = cached_paths(name, exporter, torch.__version__)
    if not (model_path.exists() and feeds_path.exists()):
        module, args = module_and_args(name)
        export(module, args, list(e.input_names), None, exporter, model_path, e.dynamic_axes)
        save_feeds(feeds_path, {n: a.detach().numpy() for n, a in zip(e.input_names, args)})
    model = onnx.load(str(model_path))
    with np.load(feeds_path) as stored:
        graph_inputs = [i.name for i in model.graph.input]
        feeds = {n: stored[n] for n in graph_inputs if n in stored.files}
    shapes = {n: list(a.shape) for n, a in feeds.items()} if e.dynamic_axes else None
    return Sample(name, exporter, model, feeds, shapes)

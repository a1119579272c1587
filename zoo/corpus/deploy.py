"""The corpus at the sizes people deploy: 224 px classifiers, a 640 px detector, full-size
transformers at 128 tokens, Whisper-tiny's encoder, a CRNN and a tiny model with ``If``.

The small corpus (64x64 images, transformers of 2 layers of width 64) measures per-call
overhead more than kernels; these entries are the standard architectures at their usual
sizes, batch 1, with seeded random weights (``torch.manual_seed(0)``, no download), in eval
mode. :data:`SIZES` is the table of every entry's inputs (name -> shape and dtype), which
the builders read, so the table is what is exported.

Examples
--------
>>> SIZES["deploy_bert_base"]
{'input_ids': ((1, 128), 'int64'), 'attention_mask': ((1, 128), 'int64')}
>>> FAMILIES["deploy_control_if"]
'control flow'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from zoo.corpus._torchvision import import_torchvision
from zoo.corpus.vision import as_tensors

__all__ = ["BUILDERS", "FAMILIES", "SIZES", "build"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_IMAGE = {"x": ((1, 3, 224, 224), "float32")}
_TOKENS = {"input_ids": ((1, 128), "int64"), "attention_mask": ((1, 128), "int64")}

#: every entry's inputs, in the order the module takes them: name -> ((shape), dtype)
SIZES: dict[str, dict[str, tuple[tuple[int, ...], str]]] = {
    "deploy_resnet50": _IMAGE,
    "deploy_mobilenet_v3_large": _IMAGE,
    "deploy_efficientnet_b0": _IMAGE,
    "deploy_convnext_tiny": _IMAGE,
    "deploy_vit_b_16": _IMAGE,
    "deploy_swin_t": _IMAGE,
    "deploy_fcos_resnet50_fpn": {"x": ((1, 3, 640, 640), "float32")},
    "deploy_bert_base": _TOKENS,
    "deploy_distilbert": _TOKENS,
    "deploy_gpt2": _TOKENS,
    "deploy_whisper_tiny_encoder": {"input_features": ((1, 80, 3000), "float32")},
    "deploy_crnn": {"x": ((1, 1, 32, 256), "float32")},
    "deploy_control_if": {"x": ((1, 512), "float32")},
}


def _inputs(name: str) -> tuple:
    """Seeded example inputs of ``name`` at the shapes of :data:`SIZES`: images uniform in
    [0, 1), features normal, token ids below 1000, an attention mask with the last 28 of
    128 tokens padded."""
    import torch

    args = []
    for input_name, (shape, dtype) in SIZES[name].items():
        if input_name == "input_ids":
            args.append(torch.randint(0, 1000, shape))
        elif input_name == "attention_mask":
            mask = torch.ones(shape, dtype=torch.long)
            mask[..., 100:] = 0
            args.append(mask)
        elif input_name == "input_features" or name == "deploy_control_if":
            args.append(torch.randn(shape))
        else:
            args.append(torch.rand(shape))
    return tuple(args)


def _classifier(tv_name: str) -> Callable[[], Any]:
    def built() -> Any:
        return getattr(import_torchvision().models, tv_name)(weights=None)  # 1000 classes

    return built


def _detector() -> Any:
    """torchvision's FCOS (ResNet-50 FPN) at 640x640, boxes/scores/labels as outputs (ssdlite320
    resizes every image to 320x320 whatever it is given). The score threshold is 0.05, the one
    COCO evaluation uses, not the default 0.2, so that boxes reach the suppression and the
    outputs are not empty (an untrained head at torchvision's init scores about 0.07)."""
    import torch

    inner = import_torchvision().models.detection.fcos_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=640, max_size=640,
        score_thresh=0.05)
    # the class logits' weights drawn 5x wider than torchvision's init (std 0.01): at 0.01 the
    # 100 best of 760k scores lie within 1e-7 of each other and float rounding reorders them
    torch.nn.init.normal_(inner.head.classification_head.cls_logits.weight, std=0.05)
    return as_tensors(inner)


def _hidden_states(inner: Any) -> Any:
    """``inner(input_ids, attention_mask).last_hidden_state`` as a module of positional tensors."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.inner(input_ids=ids, attention_mask=mask).last_hidden_state

    return LastHidden()


def _bert_base() -> Any:
    from transformers import BertConfig, BertModel

    return _hidden_states(BertModel(BertConfig(), add_pooling_layer=False))  # 12 layers of 768, 12 heads


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel

    return _hidden_states(DistilBertModel(DistilBertConfig()))  # 6 layers of 768


def _gpt2() -> Any:
    """GPT-2 small's decoder stack (12 layers of 768) over a 128-token prompt, no cache."""
    import torch
    from transformers import GPT2Config, GPT2Model

    inner = GPT2Model(GPT2Config())

    class Prompt(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.inner(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state

    return Prompt()


def _whisper_tiny_encoder() -> Any:
    """Whisper-tiny's encoder (4 layers of 384, 6 heads) on 30 s of 80 mel bins (1500 positions)."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(num_mel_bins=80, d_model=384, encoder_layers=4, encoder_attention_heads=6,
                           encoder_ffn_dim=1536, decoder_layers=4, decoder_attention_heads=6, decoder_ffn_dim=1536,
                           max_source_positions=1500)
    inner = WhisperEncoder(config)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return self.inner(input_features=x).last_hidden_state

    return Encoder()


def _crnn() -> Any:
    """A text-line recognizer: four 3x3 convolutions pooling a 32x256 grey image to 256
    channels of 1x64, a 2-layer bidirectional LSTM of width 256 over the 64 columns, and a
    Linear to 97 classes per step."""
    from torch import nn

    def conv(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    class CRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                *conv(1, 64), nn.MaxPool2d(2),                    # 16 x 128
                *conv(64, 128), nn.MaxPool2d(2),                  # 8 x 64
                *conv(128, 256), nn.MaxPool2d((2, 1)),            # 4 x 64
                *conv(256, 256), nn.MaxPool2d((4, 1)))            # 1 x 64
            self.rnn = nn.LSTM(256, 256, num_layers=2, bidirectional=True, batch_first=True)
            self.head = nn.Linear(512, 97)

        def forward(self, x: Any) -> Any:
            steps = self.features(x).squeeze(2).permute(0, 2, 1)  # (batch, 64, 256)
            out, _ = self.rnn(steps)
            return self.head(out)

    return CRNN()


def _control_if() -> Any:
    """A 512-512-512-2 MLP whose hidden activation is clipped to norm 2 by a scripted ``if``
    (an ONNX ``If``, legacy exporter): onnxruntime runs it in about 0.07 ms on 2 threads."""
    import torch

    @torch.jit.script
    def clip_norm(x: torch.Tensor, limit: float) -> torch.Tensor:
        norm = torch.sqrt((x * x).sum())
        if bool(norm > limit):
            return x * (limit / norm)
        return x

    class Clipped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2, self.out = torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 2)

        def forward(self, x: Any) -> Any:
            h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
            return self.out(clip_norm(h, 2.0))  # the example input's norm is 3.6: it is clipped

    return Clipped()


#: entry -> its module's builder (the example inputs come from :data:`SIZES`)
BUILDERS: dict[str, Callable[[], Any]] = {
    "deploy_resnet50": _classifier("resnet50"),
    "deploy_mobilenet_v3_large": _classifier("mobilenet_v3_large"),
    "deploy_efficientnet_b0": _classifier("efficientnet_b0"),
    "deploy_convnext_tiny": _classifier("convnext_tiny"),
    "deploy_vit_b_16": _classifier("vit_b_16"),
    "deploy_swin_t": _classifier("swin_t"),
    "deploy_fcos_resnet50_fpn": _detector,
    "deploy_bert_base": _bert_base,
    "deploy_distilbert": _distilbert,
    "deploy_gpt2": _gpt2,
    "deploy_whisper_tiny_encoder": _whisper_tiny_encoder,
    "deploy_crnn": _crnn,
    "deploy_control_if": _control_if,
}

#: entry -> family, as the small corpus names them
FAMILIES: dict[str, str] = {
    **{n: "torchvision" for n in SIZES if n.startswith(("deploy_resnet", "deploy_mobilenet", "deploy_efficientnet",
                                                        "deploy_convnext", "deploy_vit", "deploy_swin"))},
    "deploy_fcos_resnet50_fpn": "detection",
    **{n: "transformers" for n in ("deploy_bert_base", "deploy_distilbert", "deploy_gpt2",
                                   "deploy_whisper_tiny_encoder")},
    "deploy_crnn": "recurrent",
    "deploy_control_if": "control flow",
}


def build(name: str) -> tuple[Any, tuple]:
    """``name``'s module (eval mode, weights seeded by ``torch.manual_seed(0)``) and its
    example inputs, shaped as :data:`SIZES` says."""
    import torch

    torch.manual_seed(0)
    module = BUILDERS[name]()
    return module.eval(), _inputs(name)

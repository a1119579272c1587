"""Vision builders: torchvision classification, segmentation, detection, and timm.

Each builder seeds torch and returns ``(module, args)``: a module in eval mode with
random weights (no download: ``weights=None, weights_backbone=None``) and its example
input, small (64x64 where the architecture allows) so export and runs take seconds.
"""

from __future__ import annotations

from typing import Any

from zoo.corpus._torchvision import import_torchvision

__all__ = ["DETECTION", "SEGMENTATION", "TIMM", "TORCHVISION", "as_tensors", "classifier", "detector", "segmenter",
           "timm_model"]


def _image(size: int, batch: int = 1) -> Any:
    import torch

    return torch.rand(batch, 3, size, size)


#: torchvision classifier -> (input size, constructor keyword arguments)
TORCHVISION: dict[str, tuple[int, dict[str, Any]]] = {
    "resnet18": (64, {}),
    "resnet50": (64, {}),
    "mobilenet_v2": (64, {}),
    "mobilenet_v3_small": (64, {}),
    "efficientnet_b0": (64, {}),
    "convnext_tiny": (64, {}),
    "swin_t": (64, {}),
    "regnet_y_400mf": (64, {}),
    "squeezenet1_1": (64, {}),
    "shufflenet_v2_x0_5": (64, {}),
    "densenet121": (64, {}),
    "mnasnet0_5": (64, {}),
    "googlenet": (64, {"aux_logits": False, "init_weights": True}),
    "alexnet": (64, {}),
}


def classifier(name: str) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    tv = import_torchvision()
    size, kwargs = TORCHVISION[name]
    model = getattr(tv.models, name)(weights=None, num_classes=100, **kwargs)
    return model.eval(), (_image(size),)


def vit_small() -> tuple[Any, tuple]:
    """torchvision's VisionTransformer, 2 layers of width 64 on 64x64 images (vit_b_16 is 12x768)."""
    import torch

    torch.manual_seed(0)
    tv = import_torchvision()
    model = tv.models.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                                        hidden_dim=64, mlp_dim=128, num_classes=10)
    return model.eval(), (_image(64),)


SEGMENTATION = ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")


def segmenter(name: str) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    tv = import_torchvision()
    kwargs = {} if name.startswith("lraspp") else {"aux_loss": False}
    inner = getattr(tv.models.segmentation, name)(weights=None, weights_backbone=None, num_classes=5, **kwargs)

    class Out(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return self.inner(x)["out"]

    return Out().eval(), (_image(64),)


DETECTION = ("ssdlite320_mobilenet_v3_large", "retinanet_resnet50_fpn", "fcos_resnet50_fpn")


def detector(name: str) -> tuple[Any, tuple]:
    """A torchvision detector on one 128x128 image, boxes/scores/labels as outputs."""
    import torch

    torch.manual_seed(0)
    tv = import_torchvision()
    kwargs: dict[str, Any] = {"weights": None, "weights_backbone": None, "num_classes": 5}
    if not name.startswith("ssdlite"):  # ssdlite resizes every image to 320x320
        kwargs.update(min_size=128, max_size=128)
    inner = getattr(tv.models.detection, name)(**kwargs)
    return as_tensors(inner).eval(), (_image(128),)


def as_tensors(detector: Any) -> Any:
    """A torchvision detector taking one image tensor (batch of one) and returning its first
    image's ``boxes``, ``scores`` and ``labels`` as tensors, which exporters need."""
    import torch

    class Boxes(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = detector

        def forward(self, x: Any) -> Any:
            out = self.inner([x[0]])[0]
            return out["boxes"], out["scores"], out["labels"]

    return Boxes()


#: timm model -> (input size, create_model keyword arguments)
TIMM: dict[str, tuple[int, dict[str, Any]]] = {
    "resnet18": (64, {}),
    "efficientnet_b0": (64, {}),
    "vit_tiny_patch16_224": (64, {"img_size": 64}),
    "convnext_atto": (64, {}),
    "mobilevit_xxs": (64, {}),
    "deit_tiny_patch16_224": (64, {"img_size": 64, "depth": 2}),
}


def timm_model(name: str) -> tuple[Any, tuple]:
    import timm
    import torch

    torch.manual_seed(0)
    size, kwargs = TIMM[name]
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    return model.eval(), (_image(size),)

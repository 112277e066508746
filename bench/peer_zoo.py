"""PyTorch (torch.nn) twins of cnnergy's model zoo (src/net/zoo), for the PyTorch peers.

build(name) returns (model, input_shape_chw, num_classes) for each of the 15 zoo models: torchvision's
own where our zoo copies torchvision (alexnet, vgg16/19, googlenet and inception_v3 without auxiliary
heads, resnet34/50/152), and the definitions below for the others, layer for layer as the C++
(lenet5, caffenet, overfeat, inception_v4, resnetim, gait_2dcnn, gait_resnet). Input shapes and class
counts are zoo.cpp's. bench/peer_zoo_check.py checks every model against `cnnergy model-info`.
"""
import math

import torch
from torch import nn
import torchvision

# name: (input C x H x W, classes), as src/net/zoo/zoo.cpp's table.
ZOO = {
    "lenet5": ((1, 28, 28), 10),
    "alexnet": ((3, 224, 224), 1000),
    "caffenet": ((3, 227, 227), 1000),
    "overfeat": ((3, 231, 231), 1000),
    "vgg16": ((3, 224, 224), 1000),
    "vgg19": ((3, 224, 224), 1000),
    "googlenet": ((3, 224, 224), 1000),
    "inception_v3": ((3, 299, 299), 1000),
    "inception_v4": ((3, 299, 299), 1000),
    "resnet34": ((3, 224, 224), 1000),
    "resnetim": ((3, 224, 224), 1000),
    "resnet50": ((3, 224, 224), 1000),
    "resnet152": ((3, 224, 224), 1000),
    "gait_2dcnn": ((50, 60, 60), 155),
    "gait_resnet": ((50, 60, 60), 155),
}


def _out(n, kernel, stride=1, pad=0, ceil_mode=False):
    """Output size of a convolution or pooling along one axis (PyTorch's rule; a ceil-mode window must
    start inside the input or its left padding, as Caffe's and ours)."""
    span = n + 2 * pad - kernel
    if span < 0:
        raise ValueError(f"input {n} is smaller than the kernel {kernel} (padding {pad})")
    if not ceil_mode:
        return span // stride + 1
    out = math.ceil(span / stride) + 1
    if (out - 1) * stride >= n + pad:
        out -= 1
    return out


def _he_init(model):
    """cnnergy's default start (src/layers/layer.cpp): He normal with fan-in on conv/fc, biases 0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def _gaussian(layer, std, bias):
    nn.init.normal_(layer.weight, 0.0, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def lenet5(chw, classes):
    """Caffe's MNIST LeNet: conv20 5x5, max pool 2/2 (ceil), conv50 5x5, pool, ip1 500, ReLU, ip2."""
    c, h, w = chw
    for k, s in ((5, 1), (2, 2), (5, 1), (2, 2)):
        h, w = _out(h, k, s, 0, s == 2), _out(w, k, s, 0, s == 2)
    return _he_init(nn.Sequential(
        nn.Conv2d(c, 20, 5), nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Flatten(), nn.Linear(50 * h * w, 500), nn.ReLU(inplace=True), nn.Linear(500, classes)))


def caffenet(chw, classes):
    """BVLC reference CaffeNet: pool before LRN, group-2 conv2/4/5, ceil-mode pools, Caffe's gaussian
    fillers (std 0.01, fc6/fc7 0.005; biases 0 or 1)."""
    c, h, w = chw
    h, w = _out(h, 11, 4), _out(w, 11, 4)
    for _ in range(3):  # pool1, pool2, pool5 (the convolutions between keep the size)
        h, w = _out(h, 3, 2, 0, True), _out(w, 3, 2, 0, True)
    lrn = lambda: nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
    return nn.Sequential(
        _gaussian(nn.Conv2d(c, 96, 11, 4), 0.01, 0.0), nn.ReLU(inplace=True), pool(), lrn(),
        _gaussian(nn.Conv2d(96, 256, 5, 1, 2, groups=2), 0.01, 1.0), nn.ReLU(inplace=True), pool(), lrn(),
        _gaussian(nn.Conv2d(256, 384, 3, 1, 1), 0.01, 0.0), nn.ReLU(inplace=True),
        _gaussian(nn.Conv2d(384, 384, 3, 1, 1, groups=2), 0.01, 1.0), nn.ReLU(inplace=True),
        _gaussian(nn.Conv2d(384, 256, 3, 1, 1, groups=2), 0.01, 1.0), nn.ReLU(inplace=True), pool(),
        nn.Flatten(),
        _gaussian(nn.Linear(256 * h * w, 4096), 0.005, 1.0), nn.ReLU(inplace=True), nn.Dropout(0.5),
        _gaussian(nn.Linear(4096, 4096), 0.005, 1.0), nn.ReLU(inplace=True), nn.Dropout(0.5),
        _gaussian(nn.Linear(4096, classes), 0.01, 0.0))


def overfeat(chw, classes):
    """OverFeat fast (Sermanet et al. 2014): conv 96-256-512-1024-1024, 2x2 pools, fc 3072-4096."""
    c, h, w = chw
    for k, s, p in ((11, 4, 0), (2, 2, 0), (5, 1, 0), (2, 2, 0), (3, 1, 1), (3, 1, 1), (3, 1, 1), (2, 2, 0)):
        h, w = _out(h, k, s, p), _out(w, k, s, p)
    relu = lambda: nn.ReLU(inplace=True)
    return _he_init(nn.Sequential(
        nn.Conv2d(c, 96, 11, 4), relu(), nn.MaxPool2d(2, 2),
        nn.Conv2d(96, 256, 5), relu(), nn.MaxPool2d(2, 2),
        nn.Conv2d(256, 512, 3, 1, 1), relu(),
        nn.Conv2d(512, 1024, 3, 1, 1), relu(),
        nn.Conv2d(1024, 1024, 3, 1, 1), relu(), nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(1024 * h * w, 3072), relu(), nn.Dropout(0.5),
        nn.Linear(3072, 4096), relu(), nn.Dropout(0.5),
        nn.Linear(4096, classes)))


def _unit(cin, cout, kernel, stride=1, pad=0, eps=1e-3):
    """conv (no bias) + batch norm + ReLU; kernel and pad may be (h, w) pairs."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, pad, bias=False), nn.BatchNorm2d(cout, eps=eps),
                         nn.ReLU(inplace=True))


class _Concat(nn.Module):
    """Branches side by side, concatenated along channels."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


def _avg3(cin, cout):
    return nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False), _unit(cin, cout, 1))


def _inception_a(cin):
    return _Concat(_unit(cin, 96, 1),
                   nn.Sequential(_unit(cin, 64, 1), _unit(64, 96, 3, 1, 1)),
                   nn.Sequential(_unit(cin, 64, 1), _unit(64, 96, 3, 1, 1), _unit(96, 96, 3, 1, 1)),
                   _avg3(cin, 96))


def _reduction_a(cin):
    return _Concat(_unit(cin, 384, 3, 2),
                   nn.Sequential(_unit(cin, 192, 1), _unit(192, 224, 3, 1, 1), _unit(224, 256, 3, 2)),
                   nn.MaxPool2d(3, 2))


def _inception_b(cin):
    return _Concat(_unit(cin, 384, 1),
                   nn.Sequential(_unit(cin, 192, 1), _unit(192, 224, (1, 7), 1, (0, 3)),
                                 _unit(224, 256, (7, 1), 1, (3, 0))),
                   nn.Sequential(_unit(cin, 192, 1), _unit(192, 192, (7, 1), 1, (3, 0)),
                                 _unit(192, 224, (1, 7), 1, (0, 3)), _unit(224, 224, (7, 1), 1, (3, 0)),
                                 _unit(224, 256, (1, 7), 1, (0, 3))),
                   _avg3(cin, 128))


def _reduction_b(cin):
    return _Concat(nn.Sequential(_unit(cin, 192, 1), _unit(192, 192, 3, 2)),
                   nn.Sequential(_unit(cin, 256, 1), _unit(256, 256, (1, 7), 1, (0, 3)),
                                 _unit(256, 320, (7, 1), 1, (3, 0)), _unit(320, 320, 3, 2)),
                   nn.MaxPool2d(3, 2))


class _InceptionC(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.branch0 = _unit(cin, 256, 1)
        self.branch1_0 = _unit(cin, 384, 1)
        self.branch1_1a = _unit(384, 256, (1, 3), 1, (0, 1))
        self.branch1_1b = _unit(384, 256, (3, 1), 1, (1, 0))
        self.branch2_0 = nn.Sequential(_unit(cin, 384, 1), _unit(384, 448, (3, 1), 1, (1, 0)),
                                       _unit(448, 512, (1, 3), 1, (0, 1)))
        self.branch2_3a = _unit(512, 256, (1, 3), 1, (0, 1))
        self.branch2_3b = _unit(512, 256, (3, 1), 1, (1, 0))
        self.branch3 = _avg3(cin, 256)

    def forward(self, x):
        b1 = self.branch1_0(x)
        b2 = self.branch2_0(x)
        return torch.cat([self.branch0(x), self.branch1_1a(b1), self.branch1_1b(b1), self.branch2_3a(b2),
                          self.branch2_3b(b2), self.branch3(x)], 1)


def inception_v4(chw, classes):
    """Inception v4 (Szegedy et al. 2017) in timm's / Cadene's layout, batch norm eps 1e-3."""
    c = chw[0]
    stages = [_unit(c, 32, 3, 2), _unit(32, 32, 3), _unit(32, 64, 3, 1, 1),
              _Concat(nn.MaxPool2d(3, 2), _unit(64, 96, 3, 2)),  # Mixed_3a: 160
              _Concat(nn.Sequential(_unit(160, 64, 1), _unit(64, 96, 3)),  # Mixed_4a: 192
                      nn.Sequential(_unit(160, 64, 1), _unit(64, 64, (1, 7), 1, (0, 3)),
                                    _unit(64, 64, (7, 1), 1, (3, 0)), _unit(64, 96, 3))),
              _Concat(_unit(192, 192, 3, 2), nn.MaxPool2d(3, 2))]  # Mixed_5a: 384
    stages += [_inception_a(384) for _ in range(4)] + [_reduction_a(384)]  # 1024
    stages += [_inception_b(1024) for _ in range(7)] + [_reduction_b(1024)]  # 1536
    stages += [_InceptionC(1536) for _ in range(3)]
    return _he_init(nn.Sequential(*stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1536, classes)))


class _Residual(nn.Module):
    """Two 3x3 convolutions (with batch norm after each, or biases without) and an identity sum."""

    def __init__(self, width, batch_norm):
        super().__init__()
        bn = (lambda: nn.BatchNorm2d(width, eps=1e-5)) if batch_norm else nn.Identity
        self.conv1 = nn.Conv2d(width, width, 3, 1, 1, bias=not batch_norm)
        self.bn1 = bn()
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=not batch_norm)
        self.bn2 = bn()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


def _adapter_resnet(chw, classes, blocks, batch_norm):
    """resnetim / gait_resnet: conv1 7x7/2, max pool 3x3/2 pad 1, and per stage an adapter 3x3
    convolution (stride 1 before the first stage, 2 before the others) and identity blocks."""
    c = chw[0]
    layers = [nn.Conv2d(c, 64, 7, 2, 3, bias=not batch_norm)]
    layers += [nn.BatchNorm2d(64, eps=1e-5)] if batch_norm else []
    layers += [nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, count in enumerate(blocks):
        width = 64 << stage
        layers.append(nn.Conv2d(cin, width, 3, 1 if stage == 0 else 2, 1, bias=not batch_norm))
        layers += [nn.BatchNorm2d(width, eps=1e-5)] if batch_norm else []
        layers.append(nn.ReLU(inplace=True))
        layers += [_Residual(width, batch_norm) for _ in range(count)]
        cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return _he_init(nn.Sequential(*layers))


def resnetim(chw, classes):
    """ResNetIm of Castro et al. 2019: adapter convolutions, 3/4/6/3 blocks, biases, no batch norm."""
    return _adapter_resnet(chw, classes, (3, 4, 6, 3), batch_norm=False)


def gait_resnet(chw, classes):
    """Gait ResNet of Castro et al. 2019: adapter convolutions, 4/6/7/2 blocks, batch norm."""
    return _adapter_resnet(chw, classes, (4, 6, 7, 2), batch_norm=True)


def gait_2dcnn(chw, classes):
    """Gait 2D-CNN of Castro et al. 2019: conv 96 7x7, 192 5x5/2, 512 3x3 (each + ReLU + 2x2 pool),
    conv4 4096 2x2 (the table's full5) + ReLU + dropout 0.4, full6 2048 + ReLU + dropout 0.4, fc."""
    c, h, w = chw
    for k, s in ((7, 1), (2, 2), (5, 2), (2, 2), (3, 1), (2, 2), (2, 1)):
        h, w = _out(h, k, s), _out(w, k, s)
    relu = lambda: nn.ReLU(inplace=True)
    return _he_init(nn.Sequential(
        nn.Conv2d(c, 96, 7), relu(), nn.MaxPool2d(2, 2),
        nn.Conv2d(96, 192, 5, 2), relu(), nn.MaxPool2d(2, 2),
        nn.Conv2d(192, 512, 3), relu(), nn.MaxPool2d(2, 2),
        nn.Conv2d(512, 4096, 2), relu(), nn.Dropout(0.4),
        nn.Flatten(), nn.Linear(4096 * h * w, 2048), relu(), nn.Dropout(0.4),
        nn.Linear(2048, classes)))


_OURS = {"lenet5": lenet5, "caffenet": caffenet, "overfeat": overfeat, "inception_v4": inception_v4,
         "resnetim": resnetim, "gait_2dcnn": gait_2dcnn, "gait_resnet": gait_resnet}
_TORCHVISION_KW = {"googlenet": {"aux_logits": False, "init_weights": True},
                   "inception_v3": {"aux_logits": False, "init_weights": True}}


def build(name, input_chw=None, num_classes=None):
    """(model, input C x H x W, classes) for a zoo model; input_chw / num_classes override the zoo's
    defaults (the fixed-size classifiers of lenet5, caffenet, overfeat and gait_2dcnn follow the input)."""
    if name not in ZOO:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(ZOO)}")
    chw, classes = ZOO[name]
    chw = tuple(input_chw) if input_chw is not None else chw
    classes = num_classes if num_classes is not None else classes
    if name in _OURS:
        model = _OURS[name](chw, classes)
    else:
        if chw[0] != 3:
            raise ValueError(f"{name}: torchvision's model takes 3 input channels, not {chw[0]}")
        model = getattr(torchvision.models, name)(num_classes=classes, **_TORCHVISION_KW.get(name, {}))
    return model, chw, classes

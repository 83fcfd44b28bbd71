"""Measure the zoo's trained nets (models/cifar10_<net>.keras and .onnx, from
``tools/zoo_train.py --save models``) through ES 2.0 on llvmpipe and write their cards,
``models/cifar10_<net>.json`` and ``.md``.

  python tools/zoo_card.py TRAIN_LOG [--nets mobilenet_v2,resnet] [--scaled-bits 16]

TRAIN_LOG: the JSON lines zoo_train.py printed (steps, seconds, top-1 of the run).  Each net is
compiled from both files with its unbounded tensors calibrated on 20 CIFAR-10 training images
(2 a class), stored at ``--scaled-bits`` (es2.compile's ``scaled_bits``, default 16), and run on
the 500 test images of :func:`workbench.nets.zoo.cifar10_test`.
"""
import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

import workbench  # noqa: F401  (TF settings first)
from workbench import es2
from workbench.data import datasets
from workbench.es2.ops.conv import ConvForm
from workbench.files import project_root
from workbench.nets import zoo
from workbench.nets.models import load_model
from workbench.studies import deploy

DESCRIPTIONS = {
    "mobilenet_v2": "`zoo.mobilenet_v2_style()`: MobileNetV2's inverted residuals at width 0.35 "
                    "(1x1 expansion + ReLU6, 3x3 depthwise + ReLU6, a linear 1x1 projection, "
                    "linear residual adds), BatchNorm, GAP, Dense, softmax",
    "resnet": "`zoo.resnet_style()`: ResNet basic blocks (3x3 conv + BN + ReLU, 3x3 conv + BN, "
              "the shortcut added, ReLU) over 32 and 64 channels, GAP, Dense, softmax",
}


def cpu() -> str:
    """This machine's processor, and whether it has AVX-512 (TF's speed differs 3x)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                 if ln.startswith("model name")), platform.machine())
    return f"{name}{' with AVX-512' if 'avx512f' in info else ''}"


def measure(path, images, labels, calibration, scaled_bits) -> dict:
    model = load_model(path)
    net = es2.compile(model, calibration=calibration, scaled_bits=scaled_bits)
    result = deploy.compare_classifier(model, net, images, labels, emulate=False,
                                       progress=False)
    return {"top1_reference": result["top1_TF"], "top1_gpu": result["top1_GPU"],
            "gpu_top1_equals_reference": result["gpu_top1_equals_tf"],
            "max_probability_difference": result["max_logit_diff_gpu_tf"],
            "programs": len(net.passes),
            "split_layers": {op.name: op.split for op in net.graph.ops
                             if isinstance(op, ConvForm) and op.split > 1}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train_log")
    parser.add_argument("--nets", default="mobilenet_v2,resnet")
    parser.add_argument("--scaled-bits", type=int, default=16)
    args = parser.parse_args(argv)
    lines = Path(args.train_log).read_text().splitlines()
    runs = {r["net"]: r for r in map(json.loads, (ln for ln in lines if ln.startswith("{")))}
    images, labels = zoo.cifar10_test()
    root = datasets.classification_root("cifar10")
    calibration, _, _ = datasets.classification_arrays(root, "train", 32, limit=2)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    machine = f"{cpu()}, {runs[next(iter(runs))]['cpus']} cores"
    for name in args.nets.split(","):
        run, stem = runs[name], project_root() / "models" / f"cifar10_{name}"
        test = {"images": len(images), "calibration_images": len(calibration),
                "scaled_bits": args.scaled_bits,
                **{form: measure(stem.with_suffix(f".{form}"), images, labels,
                                 list(calibration), args.scaled_bits)
                   for form in ("keras", "onnx")}}
        card = {"model": stem.name + ".keras", "onnx": stem.name + ".onnx",
                "net": DESCRIPTIONS[name], "parameters": run["parameters"],
                "multiply_adds": run["multiply_adds"],
                "recipe": {"function": "workbench.nets.zoo.train_briefly", "steps": run["steps"],
                           "batch": run["batch"], "optimizer": "adam, cosine decay",
                           "learning_rate": 3e-3, "seed": 0,
                           "batchnorm": "recalibrated on 500 training images"},
                "training_seconds": run["seconds"], "machine": machine, "commit": commit,
                "data": "CIFAR-10 training images (all 50,000); scored on the first 50 test "
                        "images a class (500)",
                "top1_keras_at_training": run["top1"], "test": test,
                "reproduce": "WORKBENCH_DATA=... python tools/zoo_train.py --nets "
                             f"{name} --steps {run['steps']} --save models; python "
                             f"tools/zoo_card.py TRAIN_LOG --nets {name} --scaled-bits "
                             f"{args.scaled_bits}"}
        stem.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
        rows = "\n".join(
            f"| {form} | {100 * t['top1_reference']:.1f} % | {100 * t['top1_gpu']:.1f} % | "
            f"{100 * t['gpu_top1_equals_reference']:.1f} % | {t['max_probability_difference']:.3f} "
            f"| {t['programs']} |" for form, t in (("Keras (TF)", test["keras"]),
                                                   ("ONNX (ONNX Runtime)", test["onnx"])))
        stem.with_suffix(".md").write_text(
            f"# cifar10_{name}: a real net, trained briefly\n\n"
            f"Net: {card['net']}; {card['parameters']:,} parameters, "
            f"{card['multiply_adds']:,} multiply-adds at 32x32. `{card['model']}` (Keras) and "
            f"`{card['onnx']}` (the same weights as PyTorch's exporter writes them, "
            "`tools/torch_style_onnx.py`).\n"
            f"Recipe: {json.dumps(card['recipe'])}; {run['seconds']:.0f} s of training on "
            f"{machine} (shared with other work).\nData: {card['data']}.\n\n"
            "Through ES 2.0 (Mesa llvmpipe), its ReLUs and linear tensors stored with a scale "
            f"calibrated on {len(calibration)} training images, at {args.scaled_bits} bits "
            f"(`es2.compile(scaled_bits={args.scaled_bits})`), its wide convs split "
            f"({test['keras']['split_layers']}):\n\n"
            "| file | reference top-1 | GPU top-1 | GPU top-1 = reference | largest "
            "probability difference | programs |\n|---|---|---|---|---|---|\n" + rows +
            f"\n\nMeasured at commit {commit}. Reproduce: `{card['reproduce']}`\n")
        print(name, json.dumps(test), flush=True)


if __name__ == "__main__":
    sys.exit(main())

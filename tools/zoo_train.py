"""Train the zoo's two nets briefly on CIFAR-10 and print top-1 on 500 test images
(:func:`workbench.nets.zoo.train_briefly`), to measure how many steps each needs to be clearly
above chance and how long that takes; optionally write each trained net as ONNX
(:func:`torch_style_onnx.to_onnx_torch_style`) and measure it against Keras with ONNX Runtime.

  python tools/zoo_train.py [--nets mobilenet_v2,resnet] [--steps 100,200,300] [--out DIR]
  python tools/zoo_train.py --steps 1000 --save models   # the reference checkpoints

``--save DIR`` writes each net (one ``--steps``) as ``DIR/cifar10_<net>.keras`` and ``.onnx``
(the checkpoints in models/, whose cards quote this command's line).

One line of JSON a run (net, steps, batch, seconds, top-1 before and after BatchNorm
calibration, parameters, multiply-adds, with ``--out`` the largest |ONNX Runtime - Keras|
probability over the 500 test images); each run starts from the same initial weights.
"""
import argparse
import json
import os
import platform
import sys

import workbench  # noqa: F401  (TF settings first)
from torch_style_onnx import to_onnx_torch_style  # beside this script
from workbench.nets import zoo

NETS = {"mobilenet_v2": zoo.mobilenet_v2_style, "resnet": zoo.resnet_style}


def onnx_max_diff(model, proto):
    """The largest |ONNX Runtime - Keras| difference of the probabilities over the 500 test
    images."""
    import numpy as np

    from workbench.nets.onnx_model import OnnxModel

    images, _ = zoo.cifar10_test()
    got = OnnxModel(proto).predict(images)
    return float(np.abs(got - model.predict(images, verbose=0)).max())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default="mobilenet_v2,resnet")
    parser.add_argument("--steps", default="300")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="folder for <net>_<steps>.onnx of each trained net")
    parser.add_argument("--save", help="folder for cifar10_<net>.keras and .onnx (one --steps)")
    args = parser.parse_args(argv)
    try:
        zoo.cifar10_test(1)
    except FileNotFoundError as error:
        sys.exit(str(error))
    for name in args.nets.split(","):
        for steps in map(int, args.steps.split(",")):
            model = NETS[name](seed=args.seed)
            model, result = zoo.train_briefly(model, steps, args.batch, args.seed,
                                              learning_rate=args.lr)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                proto = to_onnx_torch_style(model,
                                            os.path.join(args.out, f"{name}_{steps}.onnx"))
                result["onnx_max_diff"] = onnx_max_diff(model, proto)
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                model.save(os.path.join(args.save, f"cifar10_{name}.keras"))
                proto = to_onnx_torch_style(model, os.path.join(args.save,
                                                                f"cifar10_{name}.onnx"))
                result["onnx_max_diff"] = onnx_max_diff(model, proto)
            print(json.dumps({"net": name, **result, "parameters": model.count_params(),
                              "multiply_adds": zoo.multiply_adds(model), "cpus": os.cpu_count(),
                              "machine": platform.processor() or platform.machine()}),
                  flush=True)


if __name__ == "__main__":
    main()

"""Train the reference CIFAR-10 classifier checkpoint, or export one from a (partial) run.

  python tools/cifar10_reference.py train RUN_DIR [EPOCHS]     (resumable; default 60 epochs)
  python tools/cifar10_reference.py export RUN_DIR [OUT_STEM]  (default models/cifar10_reference)

The recipe is the classifier notebook's (preset cifar10, quantisation-aware, augmentation,
Adam 3e-3 with cosine decay, batch 64) on the 20,000 training images of the data folder;
validation during training on 100 test images a class, the final numbers on all 10,000.
"""
import sys

import workbench  # noqa: F401  (TF settings first)
from workbench.data import datasets
from workbench.nets import classify

RECIPE = dict(preset="cifar10", quantize=True, augment=True, optimizer="adam",
              learning_rate=3e-3, schedule="cosine", batch=64, val_limit=100, seed=0)


def train(run_dir, epochs=60):
    classify.train(run_dir, data=datasets.classification_root("cifar10"), epochs=int(epochs),
                   verbose=2, **RECIPE)


if __name__ == "__main__":
    {"train": train}[sys.argv[1]](*sys.argv[2:])

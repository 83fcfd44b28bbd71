"""Nets and their training: activations (TF, numpy and GLSL forms defined once), Keras layers,
model builders, resumable training, the classifier and SR recipes."""

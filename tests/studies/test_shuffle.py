"""The channel shuffle study: the article's order table and the mixing measure (the notebook
runs in tests/integration/test_notebooks.py)."""

import numpy as np

from workbench.studies import shuffle


def test_order_table_128_channels_3_iterations_is_the_articles():
    # 32 textures, step 8: position i binds texture (8i) % 32 + (8i) // 32
    orders = shuffle.cumulative_orders(128, 8, 3)
    assert orders[0][:16] == [0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27]
    assert orders[0][-4:] == [7, 15, 23, 31]
    # two shuffles: 0, 2, 4, 6, ... (the evens, then the odds)
    assert orders[1][:16] == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
    assert orders[1][16:20] == [1, 3, 5, 7] and orders[1][-1] == 31
    assert orders[2][:8] == [0, 16, 1, 17, 2, 18, 3, 19]
    text = shuffle.order_table(128, 8, 3, width=8).splitlines()
    assert text == ["128 channels (32 textures), step 8",
                    "iteration 1: 0, 8, 16, 24, 1, 9, 17, 25, ...",
                    "iteration 2: 0, 2, 4, 6, 8, 10, 12, 14, ...",
                    "iteration 3: 0, 16, 1, 17, 2, 18, 3, 19, ..."]
    rows = shuffle.order_rows(128, 8, 3)
    assert rows[1] == {"position": 1, "after 1": 8, "after 2": 2, "after 3": 16}
    assert "| 1 | 8 | 2 | 16 |" in shuffle.markdown_table(128, 8, 3)


def test_steps_and_identity():
    assert shuffle.valid_steps(128) == [1, 2, 4, 8, 16, 32]
    assert shuffle.valid_steps(192) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    assert shuffle.cumulative_orders(128, 1, 1)[0] == list(range(32))
    assert shuffle.cumulative_orders(128, 32, 1)[0] == list(range(32))
    p = shuffle.shuffle_matrix(128, 8)
    assert (p.sum(0) == 1).all() and (p.sum(1) == 1).all()
    # output texture 1 (channels 4..7) holds input texture 8 (channels 32..35), channel by channel
    assert (p[4:8, 32:36] == np.eye(4, dtype=bool)).all() and p[4:8].sum() == 4


def test_mixing_counts():
    # By hand, 128 channels, step 8, 1x1 conv in 4 groups of 8 textures: after one unit,
    # output group g has read textures {2g, 2g+1} + 8k (k = 0..3), two from every input group
    # (and each output texture its own input through the residual), so not everything.  In the
    # second unit group g reads unit-1 textures from all four groups, whose union is every
    # input texture: 2 units.  One unit can never do it (a group reads only 32 of 128 channels).
    assert shuffle.mixing_units(128, 8) == 2
    assert shuffle.mixing_units(128, 8, first_shuffled=False) == 2
    assert shuffle.mixing_units(128, 8, residual=False) == 2
    # step 1 and step d are the identity: the 4 groups stay apart forever
    assert shuffle.mixing_units(128, 1) is None and shuffle.mixing_units(128, 32) is None
    assert shuffle.coverage_curve(128, 1, 3) == [0.25, 0.25, 0.25]
    # step 2 (i -> 2i mod 31): unit 1 group 0 reads the even textures of groups 0-1, unit 2
    # all even textures, unit 3 everything
    assert shuffle.mixing_units(128, 2) == 3
    assert shuffle.mixing_units(32, 1) == 1  # one group of 32: no shuffle needed
    assert shuffle.mixing_units(192, 8) == 2 and shuffle.mixing_units(192, 2) == 4
    table = {(r["channels"], r["step"]): r["units_to_mix"] for r in shuffle.mixing_table((128,))}
    assert table == {(128, 1): None, (128, 2): 3, (128, 4): 2, (128, 8): 2, (128, 16): 3,
                     (128, 32): None}
    assert "step 8 mixes every group into every other in 2 units" in \
        shuffle.verdict(shuffle.mixing_table((128,)))


def test_dependency_matrix_is_the_keras_units():
    """The boolean matrices against the Jacobian of the same units built from the workbench's
    layers (random weights, no activation: non-zero exactly where an output depends on an input)."""
    import keras
    import tensorflow as tf

    from workbench.nets.layers import GroupConv2D, Shuffle

    keras.utils.set_random_seed(0)
    c = 128
    chain = []
    for u in range(2):
        chain.append([Shuffle(8) if u else None,
                      GroupConv2D(c, 1, groups=c // 32, use_bias=False),
                      GroupConv2D(c, 3, groups=c // 4, use_bias=False)])
    x = tf.constant(np.random.default_rng(0).normal(size=(1, 1, 1, c)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        outs, h = [], x
        for shuffle_layer, conv1, conv3 in chain:
            y = shuffle_layer(h) if shuffle_layer else h
            h = h + conv3(conv1(y))
            outs.append(h)
    expected = np.eye(c, dtype=bool)
    for u, out in enumerate(outs):
        jac = tape.jacobian(out, x).numpy().reshape(c, c)
        unit = shuffle.unit_matrix(c, 8, shuffle=u > 0)
        expected = (unit.astype(int) @ expected.astype(int)) > 0
        assert ((np.abs(jac) > 1e-9) == expected).all(), f"unit {u + 1}"
    assert expected.all()  # stage layout: mixed after the second unit


def test_stage_layout_follows_the_model():
    from workbench.nets import models

    model = models.dogs_classifier("dogs120")
    shuffled = {layer.name for layer in model.layers if layer.name.endswith("_shuffle")}
    stages = shuffle.stage_layout("dogs120")
    assert {f"s{r['stage']}u{u}_shuffle" for r in stages for u in r["shuffled_units"]} == shuffled
    assert [(r["channels"], r["mixed_at_unit"]) for r in stages] == \
        [(32, 1), (32, 1), (64, 2), (128, 2), (192, 2)]
    assert stages[3]["order"][:6] == [0, 8, 16, 24, 1, 9]


def test_figures(tmp_path):
    from workbench import figures

    fig = shuffle.binding_diagram(128, 8, 3)
    assert len(fig.axes[0].lines) >= 3 * 32
    figures.save_figure(fig, "diagram", tmp_path)
    fig = shuffle.mixing_figure(shuffle.mixing_table((64, 128), curve_units=3))
    assert len(fig.axes) == 2
    figures.plt.close("all")

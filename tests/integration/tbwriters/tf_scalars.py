"""Writes TensorBoard scalars with TensorFlow's own event writers. Runs inside the tensorflow learner image.

* ``<out>/train``: TF2 ``tf.summary.scalar`` (TensorBoard's wrapper over ``tf.summary.write``), the
  tensor-encoded form, plus a tensor of another plugin the reader must skip.
* ``<out>/test``: TF1 ``tf.compat.v1.summary.scalar`` through ``tf.compat.v1.summary.FileWriter`` (graph
  mode), the legacy ``simple_value`` form FfDL's tf-summary-model example wrote.

Usage: python tf_scalars.py OUT [STEPS]
"""

import sys

import tensorflow as tf

out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
other = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="other"))
train = tf.summary.create_file_writer(f"{out}/train")
with train.as_default():
    for step in range(steps):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
        tf.summary.write("weights", tf.random.normal([16]), step=step, metadata=other)
        train.flush()
train.close()

with tf.Graph().as_default():
    value = tf.compat.v1.placeholder(tf.float32, shape=())
    summary = tf.compat.v1.summary.scalar("accuracy", value)
    with tf.compat.v1.Session() as session:
        writer = tf.compat.v1.summary.FileWriter(f"{out}/test")
        for step in range(steps):
            writer.add_summary(session.run(summary, {value: step / 10.0}), step)
            writer.flush()
        writer.close()
print(f"tf wrote {steps} steps", flush=True)

"""gpt-oss: flax nnx model in Tunix's style, MXFP4 dequantisation and safetensors loading."""

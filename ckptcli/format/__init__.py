"""The ckpt container format: framing, value encoding, manifests (formats/v1.md)."""

"""Team code as the tests' specs name it: small user modules for `trainer.module`."""

"""The floor under every other package: where things live (paths), how a run ended (outcomes and
their reason codes), and reading ML Metadata. It imports nothing of Conveyor's above it, so
components' executors and every layer of `pipelines` may use it."""

"""ExampleGen over Parquet files: TFX's driver with Conveyor's Arrow executor."""

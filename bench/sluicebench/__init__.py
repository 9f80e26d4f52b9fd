"""sluice experiment runner (bench/run)."""

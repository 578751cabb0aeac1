"""What every stage uses: the configuration, the device and precision, processes under torchrun,
files and pipes, terminal output, and the one-line errors."""

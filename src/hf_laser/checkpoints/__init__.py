"""Where model files come from and what a directory carries: conversion of the original checkpoints, the fairseq
checkpoint reader, downloads, the integration files written into a directory, the Hub and model cards."""

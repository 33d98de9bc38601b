"""The numbers several layers judge values by: a leaf that imports nothing of the package.

- `divergence`: how far a kernel's output is from PyTorch's and from a float64 run of the original
  forward (the metrics, the float64 reference, `wrong_bound` for "wrong results here", and the one
  phrase of a layer's accuracy). The switching judges a candidate's trial by it, the measurements a
  comparison's values.

May import: nothing
"""

# Writes the .npy/.npz fixtures of tests/unit/frontend/tensor_io_test.cc with NumPy. The files
# are committed; run this (python3 make_fixtures.py, needs numpy) only to regenerate them.
import numpy as np

np.save("f32_2x3.npy", np.array([[0.5, -1.25, 3.0], [1e-3, -0.0, 65504.0]], dtype="<f4"))
np.save("f64_fortran_2x3.npy", np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)))
np.save("i4_big_endian.npy", np.array([1, -2, 300000], dtype=">i4"))
np.save("f16.npy", np.array([1.0, -2.5, 65504.0, 2.0**-24], dtype="<f2"))
np.save("bool.npy", np.array([True, False, True]))
np.save("scalar_f64.npy", np.array(3.25))
np.save("empty_f32_0x3.npy", np.zeros((0, 3), dtype="<f4"))
with open("i8_v2.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([-(2**40), 7], dtype="<i8"), version=(2, 0))
with open("u1_v3.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([0, 200, 255], dtype="|u1"), version=(3, 0))
np.savez(
    "small_ints.npz",
    i1=np.array([-128, 127], dtype="i1"),
    i2=np.array([-32768, 32767], dtype="<i2"),
    u2=np.array([65535], dtype="<u2"),
    u4=np.array([4294967295], dtype="<u4"),
    u8=np.array([2**53], dtype="<u8"),
)
np.savez_compressed(
    "compressed.npz",
    weight=np.arange(12, dtype="<f4").reshape(3, 4) / 4,
    bias=np.array([0.5, -0.5], dtype="<f4"),
)
np.savez("complex.npz", ok=np.array([1.0], dtype="<f4"), c=np.array([1 + 2j], dtype="<c8"))

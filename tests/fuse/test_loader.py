#!/usr/bin/env python3
"""CiuicDataLoader over torchvision's ImageFolder on a real ciuic mount (issue 19, item 2): the
loader sees that the images are files of the cluster, reads them ahead through the native
client (resolved once: no MDS open and no FUSE request per sample), and hands each one to
ImageFolder's own loader and transforms. Checked image by image against torch's DataLoader
reading the same ImageFolder through the mount.

Usage: test_loader.py --bin-dir BUILD/apps  (ctest passes it and PYTHONPATH; label fuse)
"""
import os
import sys
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuse_fixture  # noqa: E402

CLUSTER = None
MNT = None


class LoaderOnMountTest(unittest.TestCase):
    def test_imagefolder_on_a_mount_is_read_ahead_natively(self):
        import numpy as np
        import torch
        from PIL import Image
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder

        import ciuic

        root = os.path.join(MNT, "images")
        rng = np.random.default_rng(3)
        for cls in ["ant", "bee"]:
            os.makedirs(os.path.join(root, cls))
            for i in range(9):
                arr = rng.integers(0, 256, size=(12 + i, 10, 3), dtype=np.uint8)
                Image.fromarray(arr).save(os.path.join(root, cls, "%02d.png" % i))
        ds = ImageFolder(root, transform=lambda img: np.asarray(img).copy())
        client = ciuic.connect(CLUSTER.conf)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # seen into: no "prefetch off" warning
                dl = ciuic.CiuicDataLoader(ds, batch_size=None, client=client)
            self.assertIsInstance(dl, DataLoader)
            theirs = list(DataLoader(ds, batch_size=None))
            ours = list(dl)
            self.assertEqual(len(ours), 18)
            for (a, la), (b, lb) in zip(theirs, ours):
                self.assertTrue(np.array_equal(a, b))
                self.assertEqual(int(la), int(lb))
            self.assertEqual(dl.last_stats["opens"], 0)
            # Shuffled, decoded in two workers, batched by torch's collate.
            dl = ciuic.CiuicDataLoader(ImageFolder(root, transform=lambda im: torch.from_numpy(
                np.asarray(im).copy())[:12, :10]), batch_size=4, shuffle=True, num_workers=2,
                client=client)
            labels = sorted(int(y) for _, ys in dl for y in ys)
            self.assertEqual(labels, [0] * 9 + [1] * 9)
        finally:
            client.close()


def main():
    def ready(cluster, mounts):
        global CLUSTER, MNT
        CLUSTER, MNT = cluster, mounts[0]

    fuse_fixture.run_tests(["mnt"], ready)

if __name__ == "__main__":
    main()

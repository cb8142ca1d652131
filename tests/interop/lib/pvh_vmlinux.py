#!/usr/bin/env python3
"""usage: pvh_vmlinux.py BZIMAGE OUT

Recover the uncompressed ELF kernel from a bzImage, and keep it only if it carries the
Xen PVH entry note (type 0x12), which lets qemu start it directly (-kernel vmlinux).
Under TCG this skips the kernel's own self-decompression, several seconds per boot.
Exit status 0 = OUT written, 1 = not possible (callers then boot the bzImage).
"""
import gzip
import lzma
import struct
import sys

MAGICS = [
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x1f\x8b\x08", "gzip"),
]


def decompress(kind, data):
    if kind == "xz":
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)
    d = gzip.zlib.decompressobj(16 + 15)
    return d.decompress(data)


def has_pvh_note(elf):
    if elf[:4] != b"\x7fELF" or elf[4] != 2:          # 64-bit ELF only
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:                                  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == 0x12:
                return True
            pos += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


def main():
    src, out = sys.argv[1], sys.argv[2]
    blob = open(src, "rb").read()
    for magic, kind in MAGICS:
        start = 0
        while (off := blob.find(magic, start)) >= 0:
            start = off + 1
            try:
                elf = decompress(kind, blob[off:])
            except Exception:
                continue
            if has_pvh_note(elf):
                with open(out, "wb") as f:
                    f.write(elf)
                print(f"pvh_vmlinux: {kind} payload at {off}: {len(elf)} bytes with PVH note")
                return 0
    print("pvh_vmlinux: no PVH-capable ELF inside", src, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

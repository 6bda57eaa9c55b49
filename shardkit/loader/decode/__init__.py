"""Decoding: JPEG bytes -> uint8 pixels, in the worker or on the device.

* :mod:`.strategies` -- the output mode, chosen once: worker decode, multi-crop views, device decode or raw samples
  (a worker-side stage and a consumer-side finish each).
* :mod:`.worker` -- the worker-side decode and crop (DCT-scaled decode, one resize per sample).
* :mod:`.multicrop` -- ``views=``: one decode per sample, every view's crop cut from it.
* :mod:`.decoders` -- the JPEG decoders a worker can use (simplejpeg, PIL, torchvision/TorchCodec).
* :mod:`.device` -- ``decode_on="device"``: batched decode where the batch is consumed, then crop and resize.
* :mod:`.deviceviews` -- ``views=`` with ``decode_on="device"``: each JPEG sent once, decoded once on the device,
  every view cut from it.
* :mod:`.cropresize` -- the batched crop-and-resize of the device path.
* :mod:`.backend` -- which library decodes JPEGs for the torchvision decoder and the device path.
"""

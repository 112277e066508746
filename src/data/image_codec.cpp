// JPEG/PNG decoding with error handlers that return control to us (setjmp/longjmp) instead of
// exiting, and the crop-only bilinear resampler of the image-folder data set.
//
// setjmp rules followed here: every object with a destructor that lives in a decoding frame is
// constructed before its setjmp, and nothing after it is constructed in that frame, so a longjmp
// back never skips a destructor. The landing site only throws.
#include "data/image_codec.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>
#include <memory>
#include <vector>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#include "core/errors.hpp"

namespace cnnergy::data {
namespace {

constexpr std::uint64_t kMaxPixels = std::uint64_t{1}
                                     << 28;  // 268 M pixels: refuse decompression bombs

// ---- JPEG
// -----------------------------------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool premature_end;
};

[[noreturn]] void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level < 0) are recovered from by libjpeg; the one we must not ignore is a premature end
// of data, where libjpeg pads the image with grey: that is a truncated file.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF && !err->premature_end) {
    err->premature_end = true;
    (*cinfo->err->format_message)(cinfo, err->message);
  }
  cinfo->err->num_warnings++;
}

void jpeg_output_message(j_common_ptr /*cinfo*/) {}  // never print to stderr from a library

// Owns a decompressor; zero-initialised so that destroying one never created is a no-op.
struct JpegDecoder {
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err{};
  ~JpegDecoder() { jpeg_destroy_decompress(&cinfo); }
};

RgbImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& file, int min_width,
                     int min_height) {
  auto decoder = std::make_unique<JpegDecoder>();
  RgbImage image;
  jpeg_decompress_struct* cinfo = &decoder->cinfo;
  JpegErrorManager* err = &decoder->err;
  cinfo->err = jpeg_std_error(&err->pub);
  err->pub.error_exit = jpeg_error_exit;
  err->pub.emit_message = jpeg_emit_message;
  err->pub.output_message = jpeg_output_message;
  if (setjmp(err->jump))
    throw DataError(file + ": cannot decode JPEG: " + std::string(err->message));

  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  if (static_cast<std::uint64_t>(cinfo->image_width) * cinfo->image_height > kMaxPixels) {
    std::snprintf(err->message, sizeof(err->message),
                  "%ux%u pixels is more than this reader accepts", cinfo->image_width,
                  cinfo->image_height);
    std::longjmp(err->jump, 1);
  }
  cinfo->out_color_space = JCS_RGB;  // libjpeg-turbo converts grey and YCbCr; CMYK is refused
  if (min_width > 0 && min_height > 0) {
    for (unsigned denom : {8u, 4u, 2u}) {
      const auto w = (cinfo->image_width + denom - 1) / denom,
                 h = (cinfo->image_height + denom - 1) / denom;
      if (w >= static_cast<unsigned>(min_width) && h >= static_cast<unsigned>(min_height)) {
        cinfo->scale_num = 1;
        cinfo->scale_denom = denom;
        break;
      }
    }
  }
  jpeg_start_decompress(cinfo);
  image.width = static_cast<int>(cinfo->output_width);
  image.height = static_cast<int>(cinfo->output_height);
  image.pixels.resize(static_cast<std::size_t>(image.width) *
                      static_cast<std::size_t>(image.height) * 3);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row =
        image.pixels.data() + static_cast<std::size_t>(cinfo->output_scanline) * image.width * 3;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  if (err->premature_end) throw DataError(file + ": truncated JPEG: " + std::string(err->message));
  return image;
}

// ---- PNG
// ------------------------------------------------------------------------------------------

struct PngSource {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t position;
  char message[256];
};

[[noreturn]] void png_error_handler(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof(source->message), "%s",
                message ? message : "unknown error");
  png_longjmp(png, 1);
}

void png_warning_handler(png_structp /*png*/, png_const_charp /*message*/) {
}  // recoverable: stay quiet

void png_read_from_memory(png_structp png, png_bytep out, png_size_t count) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (count > source->size - source->position)
    png_error(png, "unexpected end of data (truncated file)");
  std::memcpy(out, source->data + source->position, count);
  source->position += count;
}

struct PngDecoder {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngDecoder() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

RgbImage decode_png(std::span<const std::uint8_t> bytes, const std::string& file) {
  auto source = std::make_unique<PngSource>(PngSource{bytes.data(), bytes.size(), 0, {}});
  auto decoder = std::make_unique<PngDecoder>();
  RgbImage image;
  std::vector<png_bytep> rows;
  decoder->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, source.get(), png_error_handler,
                                        png_warning_handler);
  if (!decoder->png) throw OutOfMemory(file + ": libpng could not allocate a reader");
  decoder->info = png_create_info_struct(decoder->png);
  if (!decoder->info) throw OutOfMemory(file + ": libpng could not allocate an info struct");
  png_structp png = decoder->png;
  png_infop info = decoder->info;
  if (setjmp(png_jmpbuf(png)))
    throw DataError(file + ": cannot decode PNG: " + std::string(source->message));

  png_set_read_fn(png, source.get(), png_read_from_memory);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info),
                    height = png_get_image_height(png, info);
  if (static_cast<std::uint64_t>(width) * height > kMaxPixels)
    png_error(png, "more pixels than this reader accepts");
  png_set_expand(png);  // palette -> RGB, grey < 8 bits -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<png_size_t>(width) * 3)
    png_error(png, "unexpected row size after conversion to 8-bit RGB");
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y)
    rows[y] = image.pixels.data() + static_cast<std::size_t>(y) * width * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  return image;
}

bool is_jpeg(std::span<const std::uint8_t> b) {
  return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}
bool is_png(std::span<const std::uint8_t> b) {
  return b.size() >= 8 && png_sig_cmp(b.data(), 0, 8) == 0;
}

// Box-filters the image down by an integer factor k >= 2 (each output pixel averages k x k inputs).
RgbImage box_reduce(const RgbImage& in, int k) {
  RgbImage out;
  out.width = in.width / k;
  out.height = in.height / k;
  out.pixels.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  const int area = k * k;
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x)
      for (int c = 0; c < 3; ++c) {
        int sum = 0;
        for (int dy = 0; dy < k; ++dy) {
          const std::uint8_t* row =
              in.pixels.data() +
              (static_cast<std::size_t>(y * k + dy) * in.width + static_cast<std::size_t>(x) * k) *
                  3 +
              c;
          for (std::size_t dx = 0; dx < static_cast<std::size_t>(k); ++dx) sum += row[dx * 3];
        }
        out.pixels[(static_cast<std::size_t>(y) * out.width + x) * 3 + c] =
            static_cast<std::uint8_t>((sum + area / 2) / area);
      }
  return out;
}

struct Tap {
  int i0, i1;
  float w1;  // weight of i1; i0 gets 1 - w1
};

// Source taps for destination coordinates [first, first + count) of a `dst`-long axis resampled
// from a `src`-long one (pixel centres aligned), where the source was box-reduced by `k`
// from an axis of `original` pixels.
std::vector<Tap> taps(int first, int count, int dst, int src, int original, int k, bool mirror) {
  std::vector<Tap> out(static_cast<std::size_t>(count));
  const double scale = static_cast<double>(original) / dst;
  for (int i = 0; i < count; ++i) {
    const int d = first + (mirror ? count - 1 - i : i);
    double s = ((d + 0.5) * scale - 0.5 - (k - 1) * 0.5) / k;  // in the reduced image's pixels
    if (s < 0) s = 0;
    if (s > src - 1) s = src - 1;
    const int i0 = static_cast<int>(s);
    out[static_cast<std::size_t>(i)] = {i0, i0 + 1 < src ? i0 + 1 : i0, static_cast<float>(s - i0)};
  }
  return out;
}

}  // namespace

RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& file, int min_width,
                      int min_height) {
  if (is_jpeg(bytes)) return decode_jpeg(bytes, file, min_width, min_height);
  if (is_png(bytes)) return decode_png(bytes, file);
  throw DataError(file + ": neither a JPEG nor a PNG file (" + std::to_string(bytes.size()) +
                  " bytes)");
}

void resample_crop(const RgbImage& image, const ResampleSpec& spec, std::span<float> out) {
  CNNERGY_CHECK(image.width > 0 && image.height > 0, "empty image");
  CNNERGY_CHECK(spec.crop_x >= 0 && spec.crop_y >= 0 &&
                    spec.crop_x + spec.crop_width <= spec.resized_width &&
                    spec.crop_y + spec.crop_height <= spec.resized_height,
                "crop outside the resized image");
  const std::size_t plane = static_cast<std::size_t>(spec.crop_width) * spec.crop_height;
  CNNERGY_CHECK(out.size() == 3 * plane, "output span of the wrong size");
  const int k = std::min(image.width / spec.resized_width, image.height / spec.resized_height);
  RgbImage reduced;
  if (k >= 2) reduced = box_reduce(image, k);
  const RgbImage& src = k >= 2 ? reduced : image;
  const int kk = k >= 2 ? k : 1;
  const std::vector<Tap> xs = taps(spec.crop_x, spec.crop_width, spec.resized_width, src.width,
                                   image.width, kk, spec.mirror);
  const std::vector<Tap> ys =
      taps(spec.crop_y, spec.crop_height, spec.resized_height, src.height, image.height, kk, false);
  const std::size_t stride = static_cast<std::size_t>(src.width) * 3;
  for (int oy = 0; oy < spec.crop_height; ++oy) {
    const Tap& ty = ys[static_cast<std::size_t>(oy)];
    const std::uint8_t* r0 = src.pixels.data() + static_cast<std::size_t>(ty.i0) * stride;
    const std::uint8_t* r1 = src.pixels.data() + static_cast<std::size_t>(ty.i1) * stride;
    for (int ox = 0; ox < spec.crop_width; ++ox) {
      const Tap& tx = xs[static_cast<std::size_t>(ox)];
      const std::size_t a = static_cast<std::size_t>(tx.i0) * 3,
                        b = static_cast<std::size_t>(tx.i1) * 3;
      for (int c = 0; c < 3; ++c) {
        const float top = r0[a + c] + tx.w1 * (static_cast<float>(r0[b + c]) - r0[a + c]);
        const float bottom = r1[a + c] + tx.w1 * (static_cast<float>(r1[b + c]) - r1[a + c]);
        const float v = top + ty.w1 * (bottom - top);
        out[static_cast<std::size_t>(c) * plane + static_cast<std::size_t>(oy) * spec.crop_width +
            ox] = v * spec.scale[c] + spec.shift[c];
      }
    }
  }
}

}  // namespace cnnergy::data

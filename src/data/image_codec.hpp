// Decoding JPEG (libjpeg-turbo) and PNG (libpng) files held in memory to 8-bit RGB, and the
// resampling the image-folder data set needs. A corrupt image is a DataError naming the file: the
// libraries' default error handlers would call exit() or abort, so both get handlers that longjmp
// back to the decoder, which then throws.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cnnergy::data {

// 8-bit RGB, rows top to bottom, pixels interleaved (R, G, B).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  // width * height * 3
};

// Decodes a JPEG or PNG (told apart by their signatures, not by the file name). Grey images become
// RGB, alpha is dropped, 16-bit PNG samples are reduced to 8 bits. For JPEG, libjpeg's DCT scaling
// (1/2, 1/4, 1/8) is used when the smaller image is still at least min_width x min_height, which
// makes decoding large photos several times faster; pass 0, 0 for full size. `file` names the image
// in errors. Throws DataError for anything that is not a readable JPEG or PNG.
RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& file,
                      int min_width = 0, int min_height = 0);

// Where a crop of the resized image comes from and how its values are normalised.
struct ResampleSpec {
  int resized_width = 0;  // the size the whole image is (virtually) resized to
  int resized_height = 0;
  int crop_x = 0;  // top-left corner of the crop in the resized image
  int crop_y = 0;
  int crop_width = 0;
  int crop_height = 0;
  bool mirror = false;         // flip the crop left-right
  float scale[3] = {1, 1, 1};  // out = byte * scale[c] + shift[c]
  float shift[3] = {0, 0, 0};
};

// Writes the crop as fp32 planes (3 x crop_height x crop_width) to `out`. Only the cropped pixels
// are computed; resizing is bilinear with pixel centres aligned (as OpenCV's INTER_LINEAR), after
// an integer box-filter reduction when shrinking by 2x or more, so large downscales do not alias.
void resample_crop(const RgbImage& image, const ResampleSpec& spec, std::span<float> out);

}  // namespace cnnergy::data

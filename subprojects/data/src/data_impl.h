/* Private helpers shared by the data sources. */
#ifndef MT_DATA_IMPL_H
#define MT_DATA_IMPL_H

#include <mt/data.h>

/* Lower-case hex MD5 of data[0..len) into out (32 chars + NUL). */
void data_md5_hex(const void *data, size_t len, char out[33]);

#endif /* MT_DATA_IMPL_H */

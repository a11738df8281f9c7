/* mt-data: Megatron's indexed dataset (.bin/.idx), GPTDataset sample order, blending, mock data,
 * the pretraining sampler and the GPT-2 byte-level BPE tokenizer. Needs only mt-core. */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <mt/data/gpt.h>
#include <mt/data/indexed.h>
#include <mt/data/random.h>
#include <mt/data/tokenizer.h>

#endif /* MT_DATA_H */

/* Private to libs/train: what args.c shares with train.c. */
#ifndef MT_TRAIN_IMPL_H
#define MT_TRAIN_IMPL_H

#include <jansson.h>
#include <mt/train.h>

/* Adds the model's shape (Megatron's argument names: num_layers, hidden_size, ...) to `obj`, as a
 * checkpoint's args record it for --use-checkpoint-args. */
mt_status train_args_model_json(const mt_train_args *a, json_t *obj);

#endif /* MT_TRAIN_IMPL_H */
